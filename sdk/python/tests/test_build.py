"""`pip install ./sdk/python` must work offline: the in-tree build backend
needs nothing from a package index. Build the wheel with it and import the
SDK from the wheel alone."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BuildTest(unittest.TestCase):
    def test_wheel_from_the_in_tree_backend(self) -> None:
        sys.path.insert(0, os.path.join(ROOT, "_build"))
        try:
            import tide_build
        finally:
            sys.path.pop(0)
        self.assertEqual(tide_build.get_requires_for_build_wheel(), [])
        out = tempfile.mkdtemp()
        name = tide_build.build_wheel(out)
        whl = os.path.join(out, name)
        with zipfile.ZipFile(whl) as zf:
            names = zf.namelist()
        self.assertIn("tide/ml/__init__.py", names)
        self.assertIn("tide/core/exceptions.py", names)
        self.assertTrue(any(n.endswith(".dist-info/RECORD") for n in names))
        # A clean interpreter imports the SDK from the wheel alone.
        code = "import tide.ml, tide.ml.entities, tide.core.exceptions; print(tide.ml.MLClient.__name__)"
        res = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r); %s" % (whl, code)],
                             capture_output=True, text=True, cwd=out)
        self.assertEqual(res.stdout.strip(), "MLClient", res.stderr)
        sdist = tide_build.build_sdist(out)
        self.assertTrue(os.path.isfile(os.path.join(out, sdist)))


if __name__ == "__main__":
    unittest.main()
