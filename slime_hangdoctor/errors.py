"""Errors the CLI turns into a clear message and an exit code (never a traceback)."""

from __future__ import annotations


class HangDoctorError(Exception):
    """Root of every error the doctor reports to a user."""

    help_text: str = ""
    exit_code: int = 3

    def __init__(self, message: str, *, help_text: str | None = None) -> None:
        super().__init__(message)
        if help_text is not None:
            self.help_text = help_text


class RayUnreachable(HangDoctorError):
    """No Ray cluster answered at any form of the address."""

    help_text = (
        "Give the address as Ray users do: 'auto' (RAY_ADDRESS, then the local cluster), "
        "'host:6379' (GCS) or 'http://host:8265' (dashboard). The dashboard must be running: "
        "slime-hangdoctor reads the cluster through Ray's state API, which lives in the dashboard."
    )


class BundleInvalid(HangDoctorError):
    """A directory or archive is not a readable evidence bundle."""

    help_text = "Pass a directory or .tar.gz written by `slime-hangdoctor collect --bundle`."


class BundleNotWritable(HangDoctorError):
    """The evidence bundle could not be written where asked."""

    help_text = "Choose a writable --bundle / --bundle-dir, or check free disk space."


class UsageError(HangDoctorError):
    """Bad command-line input."""


class ParseError(ValueError):
    """A raw artefact could not be parsed; the message says why (it becomes a blind spot)."""
