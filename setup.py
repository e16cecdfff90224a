"""Which packages ship: every specdec_cli package found on disk, and the checkout's cards/ as
specdec_cli.builtin_cards (pyproject.toml holds everything else). A list written by hand once
left a new subpackage out of the wheel; tests/test_install.py builds and installs the wheel."""

from setuptools import find_packages, setup

CARDS = {"specdec_cli.builtin_cards": "cards", "specdec_cli.builtin_cards.configs": "cards/configs",
         "specdec_cli.builtin_cards.weights": "cards/weights"}

setup(packages=find_packages(include=["specdec_cli", "specdec_cli.*"]) + list(CARDS), package_dir=CARDS)
