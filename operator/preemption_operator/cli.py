"""The `preemption-operator` command: `run`, `simulate` and `crds`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="preemption-operator")
def cli() -> None:
    """A Kueue-compatible preemption engine: admits workloads against quota, chooses victims, explains why."""


@cli.command()
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("crds"),
    show_default=True,
    help="Folder to write the CRD files to.",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the folder differs from the models.")
def crds(output_dir: Path, check: bool) -> None:
    """Generate the CustomResourceDefinitions from the API models."""
    from .api import crdgen

    if check:
        stale = [
            crdgen.file_name(model)
            for model in crdgen.ALL_KINDS
            if not (output_dir / crdgen.file_name(model)).is_file()
            or (output_dir / crdgen.file_name(model)).read_text() != crdgen.render(model)
        ]
        if stale:
            click.echo(f"stale CRDs in {output_dir}: {', '.join(stale)}; run `preemption-operator crds`", err=True)
            sys.exit(1)
        click.echo(f"{output_dir}: up to date")
        return
    for path in crdgen.write_all(output_dir):
        click.echo(f"wrote {path}")


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
