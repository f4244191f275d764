"""The `specrej` command: argument parsing and printing (`main`), and `specrej doctor` (`doctor`)."""


def main(argv=None) -> int:
    from .main import main as run

    return run(argv)
