"""os2g: Python helpers for the os2g S3 filesystem.

Install from the repository, without a package index::

    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-index --no-build-isolation ./python

The package is pure Python and imports torch only where a helper needs it.
"""

__version__ = "0.3.0"

__all__ = ["__version__"]
