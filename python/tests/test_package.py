"""Tests of the installed package itself (run by python/python_test.go)."""

import re
import unittest

import os2g


class PackageTest(unittest.TestCase):
    def test_version(self) -> None:
        self.assertRegex(os2g.__version__, r"^\d+\.\d+\.\d+$")

    def test_installed_not_source_tree(self) -> None:
        # The test runner executes from outside the repository, so the
        # import must resolve to the venv's installed copy.
        self.assertIn("site-packages", os2g.__file__)


if __name__ == "__main__":
    unittest.main()
