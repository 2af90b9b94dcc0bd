"""Command-line interface (typer). Entry point: `kvspill.cli.main:main`."""
