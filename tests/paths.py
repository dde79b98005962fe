"""Where the repository's own files are, for tests that read them (never a path outside the clone)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
TRACES = DATA / "traces"
REVIEWS = DATA / "admissionreview"
MANIFESTS = DATA / "manifests"
