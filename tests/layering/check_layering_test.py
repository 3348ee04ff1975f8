#!/usr/bin/env python3
"""Cases for tools/check_layering.py, each on a tiny tree of fake modules written to a temp dir."""

import atexit
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import check_layering  # noqa: E402


def tree(files):
    """Writes {path: text} under a fresh temp dir; returns the dir."""
    root = tempfile.mkdtemp(prefix="layering_")
    atexit.register(shutil.rmtree, root, True)
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
    return root


BASE = {
    "low/CMakeLists.txt": "add_library(stepsim_low low.cpp)\n",
    "low/low.hpp": "#pragma once\n",
    "low/low.cpp": '#include "low/low.hpp"\n',
    "mid/CMakeLists.txt": "add_library(stepsim_mid mid.cpp)\ntarget_link_libraries(stepsim_mid PUBLIC stepsim_low)\n",
    "mid/mid.hpp": '#pragma once\n#include "low/low.hpp"\n',
    "mid/mid.cpp": '#include "mid/mid.hpp"\n',
}


class CheckLayering(unittest.TestCase):
    def assert_one_error(self, files, *says):
        """The tree BASE | files has exactly one violation, and its line contains every `says`."""
        errors = check_layering.check(tree(BASE | files))
        self.assertEqual(len(errors), 1, errors)
        for text in says:
            self.assertIn(text, errors[0])

    # top links mid PUBLIC, mid links low PUBLIC: top may include both. No violation.
    def test_transitive_public_link_is_enough(self):
        root = tree(BASE | {
            "top/CMakeLists.txt": "add_library(stepsim_top top.cpp)\ntarget_link_libraries(stepsim_top PRIVATE stepsim_mid)\n",
            "top/top.cpp": '#include "mid/mid.hpp"\n#include "low/low.hpp"\n',
        })
        self.assertEqual(check_layering.check(root), [])

    # side links nothing but includes low's header: exactly one violation, naming file and target.
    def test_include_without_link_is_reported(self):
        self.assert_one_error({
            "side/CMakeLists.txt": "add_library(stepsim_side side.cpp)\n",
            "side/side.cpp": '#include "low/low.hpp"\n',
        }, "side/side.cpp", "stepsim_low")

    # mid links low PRIVATE: low's headers do not pass on to top, and mid's public header may not
    # include low (two violations); a header only mid's sources include may (yaml_tree.hpp's case).
    def test_private_link_does_not_pass_on(self):
        files = BASE | {
            "mid/CMakeLists.txt": "add_library(stepsim_mid mid.cpp)\ntarget_link_libraries(stepsim_mid PRIVATE stepsim_low)\n",
            "mid/detail.hpp": '#pragma once\n#include "low/low.hpp"\n',
            "mid/mid.cpp": '#include "mid/mid.hpp"\n#include "mid/detail.hpp"\n',
            "top/CMakeLists.txt": "add_library(stepsim_top top.cpp)\ntarget_link_libraries(stepsim_top PRIVATE stepsim_mid)\n",
            "top/top.cpp": '#include "mid/mid.hpp"\n#include "low/low.hpp"\n',
        }
        errors = check_layering.check(tree(files))
        self.assertEqual(len(errors), 2, errors)
        self.assertTrue(any("mid/mid.hpp" in e for e in errors), errors)
        self.assertTrue(any("top/top.cpp" in e for e in errors), errors)

    # Two targets in one folder: a header listed by the INTERFACE target belongs to it, so
    # linking that target allows that header and not the folder's other headers.
    def test_header_owned_by_the_target_that_lists_it(self):
        self.assert_one_error({
            "low/CMakeLists.txt": "add_library(stepsim_low low.cpp)\nadd_library(stepsim_plain INTERFACE plain.hpp)\n",
            "low/plain.hpp": "#pragma once\n",
            "side/CMakeLists.txt": "add_library(stepsim_side side.cpp)\ntarget_link_libraries(stepsim_side PUBLIC stepsim_plain)\n",
            "side/side.cpp": '#include "low/plain.hpp"\n#include "low/low.hpp"\n',
        }, '"low/low.hpp"')

    # A third-party header needs its library among the links.
    def test_external_header_needs_its_library(self):
        self.assert_one_error({
            "side/CMakeLists.txt": "add_library(stepsim_side side.cpp)\ntarget_link_libraries(stepsim_side PRIVATE yaml-cpp)\n",
            "side/side.cpp": "#include <yaml-cpp/yaml.h>\n#include <simgrid/s4u.hpp>\n",
        }, "simgrid/s4u.hpp")


if __name__ == "__main__":
    unittest.main()
