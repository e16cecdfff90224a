"""How every command ends: one 'Error: ...' line and an exit code, never a traceback; JSON on
stdout that stays valid when Ctrl-C cuts a run short."""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import sys
import threading

import typer
from rich.console import Console

from specdec_cli import settings
from specdec_cli.errors import SpecdecError

err = Console(stderr=True)  # everything but data: progress, tables, notes, errors


class JsonOut:
    """The JSON this command has written on stdout, so that an interrupt can leave it valid:
    `friendly` then writes {"incomplete": true, "reason": "interrupted", ...} as the only
    object (one-object output, nothing written yet) or as the last line (JSON lines)."""

    def __init__(self):
        self.start()

    def start(self, enabled: bool = False, single: bool = False, **context) -> None:
        """Declare this command's stdout: JSON (`enabled`), one object (`single`) or JSON lines."""
        self.enabled, self.single, self.context, self.records = enabled, single, context, 0

    def emit(self, obj) -> None:
        line = json.dumps(obj, ensure_ascii=False) + "\n"
        with held_interrupt():  # a line is whole or absent, and counted if written
            sys.stdout.write(line)
            sys.stdout.flush()
            self.records += 1

    def close_interrupted(self) -> None:
        if not self.enabled or (self.single and self.records):
            return
        marker = {"incomplete": True, "reason": "interrupted", **self.context}
        self.emit(marker if self.single else {**marker, "completed": self.records})


json_out = JsonOut()


@contextlib.contextmanager
def held_interrupt():
    """Hold a Ctrl-C that lands inside the block until the block is done (a second one does
    not wait). A write blocked on a full pipe is otherwise cut mid-line by the interrupt."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    held = []

    def hold(signum, frame):
        if held:
            raise KeyboardInterrupt
        held.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


def friendly(fn):
    """Every failure is one 'Error: ...' line on stderr and an exit code, never a traceback:
    SpecdecError (the user's input or environment) -> its code (2 = usage); Ctrl-C -> 130, with
    JSON output closed validly; anything else is a bug -> exit 1 (SPECDEC_DEBUG=1: traceback)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        json_out.start()
        try:
            return fn(*args, **kwargs)
        except SpecdecError as e:
            err.print(f"Error: {e}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err.show_cursor(True)  # Rich's status/progress have stopped; make sure the cursor is back
            json_out.close_interrupted()
            err.print("Interrupted.", markup=False)
            raise typer.Exit(130) from None
        except (typer.Exit, typer.Abort, BrokenPipeError):
            raise  # exits chosen on purpose; a closed pipe (`| head`) ends quietly in typer
        except Exception as e:
            if settings.debug():
                raise
            gist = next((line.strip() for line in str(e).splitlines() if line.strip()), "")[:300]
            err.print(f"Error: internal error: {type(e).__name__}: {gist} (set SPECDEC_DEBUG=1 for the traceback)",
                      markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
    return wrapper
