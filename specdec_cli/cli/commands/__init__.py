"""One module per `specdec` command: parse the options into a request (specdec_cli/cli/requests.py
checks it), call the library, render. Importing a module registers its command on
specdec_cli.cli.app."""
