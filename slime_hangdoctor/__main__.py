"""`python -m slime_hangdoctor`."""

from slime_hangdoctor.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
