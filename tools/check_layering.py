#!/usr/bin/env python3
"""Layering check: a file under sim/ includes only headers of targets its own target links.

Each folder sim/<m>/ with a CMakeLists.txt declares targets (add_library / add_executable) and
their target_link_libraries. A file belongs to the target that lists it (a header: the target
listing it or the .cpp of the same name), else to the folder's stepsim_<m>. A file may include
a header of its own target, of a target its target links (any visibility), and of any target
reachable from those through PUBLIC or INTERFACE links (CMake's usage requirements). A header
included from outside its own target may only rely on what the target passes on: its PUBLIC
links and their closure. A third-party header (<simgrid/...>, <yaml-cpp/...>, ...) needs its
library among the same links.

Usage: check_layering.py [SIM_DIR]   (default: the sim/ folder next to tools/)
Prints one line per violation and exits 1 if there is any.
"""

import os
import re
import sys

# Include prefix of a third-party library -> the link names that provide it.
EXTERNAL = {
    "simgrid": {"PkgConfig::SimGrid"},
    "xbt": {"PkgConfig::SimGrid"},
    "yaml-cpp": {"yaml-cpp"},
    "nlohmann": {"nlohmann_json::nlohmann_json"},
    "spdlog": {"spdlog::spdlog"},
    "boost": {"Boost::boost", "Boost::headers", "Boost::graph"},
    "zlib.h": {"ZLIB::ZLIB"},
    "mpi.h": {"MPI::MPI_CXX"},
    "CLI": {"CLI11::CLI11"},
}
VISIBILITY = {"PUBLIC", "PRIVATE", "INTERFACE"}
LIBRARY_KINDS = {"STATIC", "SHARED", "MODULE", "OBJECT", "INTERFACE", "EXCLUDE_FROM_ALL", "ALIAS"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
COMMAND = re.compile(r"\b(add_library|add_executable|target_link_libraries)\s*\(([^)]*)\)", re.S)
SOURCE = (".cpp", ".hpp", ".h")


class Target:
    def __init__(self, name, module):
        self.name, self.module = name, module
        self.sources, self.public, self.private = set(), set(), set()


def parse_module(sim_dir, module, targets):
    """Adds the targets of sim/<module>/CMakeLists.txt to `targets` (name -> Target)."""
    with open(os.path.join(sim_dir, module, "CMakeLists.txt"), encoding="utf-8") as f:
        text = re.sub(r"#[^\n]*", "", f.read())
    for command, args in COMMAND.findall(text):
        words = args.split()
        if not words:
            continue
        target = targets.setdefault(words[0], Target(words[0], module))
        if command != "target_link_libraries":
            target.sources |= {os.path.join(module, w) for w in words[1:] if w not in LIBRARY_KINDS}
            continue
        links = target.public  # the plain signature passes links on
        for word in words[1:]:
            if word in VISIBILITY:
                links = target.private if word == "PRIVATE" else target.public
            elif not word.startswith(("$<", "LINKER:")):
                links.add(word)


def owner_of(path, module, targets):
    """The target a file (relative to sim/) belongs to: the one listing it, the one listing the
    .cpp of the same name, else the module's stepsim_<module> target (or its first)."""
    in_module = [t for t in targets.values() if t.module == module]
    stem = os.path.splitext(path)[0]
    for t in in_module:
        if path in t.sources:
            return t
    for t in in_module:
        if stem + ".cpp" in t.sources:
            return t
    for t in in_module:
        if t.name == "stepsim_" + module:
            return t
    return in_module[0]


def public_closure(names, targets):
    """Every link name reachable from `names` through PUBLIC/INTERFACE links, `names` included."""
    seen, stack = set(), list(names)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            if name in targets:
                stack.extend(targets[name].public)
    return seen


def check(sim_dir):
    targets = {}
    modules = sorted(e for e in os.listdir(sim_dir) if os.path.isfile(os.path.join(sim_dir, e, "CMakeLists.txt")))
    for module in modules:
        parse_module(sim_dir, module, targets)
    files = {}  # path relative to sim/ -> (owning target, includes)
    for module in modules:
        for root, _, names in os.walk(os.path.join(sim_dir, module)):
            for name in sorted(names):
                if name.endswith(SOURCE):
                    full = os.path.join(root, name)
                    with open(full, encoding="utf-8") as f:
                        includes = INCLUDE.findall(f.read())
                    rel = os.path.relpath(full, sim_dir)
                    files[rel] = (owner_of(rel, module, targets), includes)

    def target_of_include(path):
        module = path.split("/")[0]
        if module not in modules:
            return None
        return files[path][0] if path in files else owner_of(path, module, targets)

    # A header is public when a file of another target includes it, or a public header of its
    # own target does; the others are seen by their target's sources only.
    public = set()
    changed = True
    while changed:
        changed = False
        for path, (owner, includes) in files.items():
            for kind, inc in includes:
                if kind == '"' and inc in files and inc not in public and not inc.endswith(".cpp"):
                    if files[inc][0] is not owner or path in public:
                        public.add(inc)
                        changed = True

    errors = []
    for path, (owner, includes) in sorted(files.items()):
        is_public = path in public
        direct = set(owner.public) | (set() if is_public else set(owner.private))
        names = public_closure(direct, targets) | {owner.name}
        where = "its PUBLIC links" if is_public else "its links"
        for kind, inc in includes:
            first = inc.split("/")[0]
            if kind == '"':
                dep = target_of_include(inc)
                if dep is not None and dep.name not in names:
                    errors.append(f"sim/{path}: includes \"{inc}\" ({dep.name}) but {owner.name} "
                                  f"does not link {dep.name} through {where}")
            elif first in EXTERNAL and not EXTERNAL[first] & names:
                errors.append(f"sim/{path}: includes <{inc}> but {owner.name} does not link "
                              f"{' or '.join(sorted(EXTERNAL[first]))} through {where}")
    return errors


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sim_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "sim")
    sim_dir = os.path.abspath(sim_dir)
    errors = check(sim_dir)
    for line in errors:
        print(line)
    if errors:
        print(f"{len(errors)} layering violation(s): link the module (docs/architecture.md, Layering)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
