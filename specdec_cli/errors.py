"""One error type for everything a user can get wrong: the CLI prints it as one line."""


class SpecdecError(Exception):
    """A problem with the user's input or environment. `exit_code` 2 = usage/input error."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
