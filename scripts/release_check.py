"""`make release-check`: what must hold before a version is published and listed.

Owns the release gate, in the order a failure is cheapest to see:

1. one version everywhere: the package's version has one source, `defect_core.__version__`
   (`pyproject.toml` declares it dynamic and reads that attribute); `agent.json`'s `version`
   and its `uvx` pin (`defect==X.Y.Z`) must equal it, or the registry would install another
   release than the one it lists;
2. the manifest and icon pass the registry's rules (`scripts/registry_check.py`);
3. the sdist and the wheel are built fresh (`python -m build` on a copy of the tree: the
   wheel is built from the sdist, as an installer would), `twine check --strict` passes on
   both (PyPI renders the README), the wheel carries only the `defect_*` packages and the
   sdist carries what building and testing need;
4. the registry's CI, here: the wheel installed into a fresh venv answers `initialize` with a
   working Agent or Terminal auth method (`registry_check.main --wheel`).

Invariants: the working tree is never written (the build runs on a copy); every failed step
is said on stderr (a version that differs as one line naming the file and both values, a
failed build or check with the end of its output); the exit status is 0 only when every step
passed.

Usage: `python scripts/release_check.py [--root DIR] [--out DIR] [--no-registry]`.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts import registry_check  # run as a file: the tree is on the path (above)

ROOT = Path(__file__).resolve().parents[1]
VERSION_ATTR = "defect_core.__version__"
SKIPPED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.pyc", "build", "dist", "*.egg-info", ".*_cache"
)
SDIST_NEEDS = ("LICENSE", "README.md", "pyproject.toml", "agent.json", "defect_core/__init__.py")


@dataclass(frozen=True)
class Artefacts:
    sdist: Path
    wheel: Path


def package_version(root: Path) -> str:
    """`defect_core.__version__`, read without importing (the tree may not be importable)."""
    source = (root / "defect_core" / "__init__.py").read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    raise registry_check.CheckError("defect_core/__init__.py: no __version__ = '...' line")


def version_problems(root: Path) -> list[str]:
    """Where the version is written twice, or `agent.json` names another one."""
    with (root / "pyproject.toml").open("rb") as handle:
        pyproject = tomllib.load(handle)
    problems = []
    if "version" in pyproject["project"]:
        problems.append(
            f"pyproject.toml: a static version {pyproject['project']['version']!r}; "
            f"it must be dynamic, read from {VERSION_ATTR}"
        )
    attr = pyproject.get("tool", {}).get("setuptools", {}).get("dynamic", {}).get("version", {})
    if attr.get("attr") != VERSION_ATTR:
        problems.append(f"pyproject.toml: the dynamic version is not read from {VERSION_ATTR}")
    version = package_version(root)
    manifest = registry_check.load_json(root / "agent.json")
    if manifest.get("version") != version:
        problems.append(
            f"agent.json: version {manifest.get('version')!r} differs from the package "
            f"version {version!r} ({VERSION_ATTR})"
        )
    package = manifest.get("distribution", {}).get("uvx", {}).get("package")
    if package != f"defect=={version}":
        problems.append(
            f"agent.json: distribution.uvx.package is {package!r}, "
            f"the package version wants 'defect=={version}'"
        )
    return problems


def build_artefacts(root: Path, out: Path, env: dict[str, str] | None = None) -> Artefacts:
    """Build the sdist, then the wheel from it, out of a copy of `root`, into `out`."""
    with tempfile.TemporaryDirectory(prefix="defect-build-") as scratch:
        source = Path(scratch) / "defect"
        shutil.copytree(root, source, ignore=SKIPPED)
        done = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    if done.returncode != 0:
        raise registry_check.CheckError(f"python -m build failed: {done.stderr.strip()[-1500:]}")
    (sdist,) = out.glob("defect-*.tar.gz")
    (wheel,) = out.glob("defect-*.whl")
    return Artefacts(sdist, wheel)


def artefact_problems(built: Artefacts, version: str) -> list[str]:
    """What the built files lack or carry too much of, and what `twine check` says."""
    problems = []
    for path in (built.sdist, built.wheel):
        if f"-{version}" not in path.name:
            problems.append(f"{path.name}: not version {version}")
    with zipfile.ZipFile(built.wheel) as wheel:
        tops = {name.split("/", 1)[0] for name in wheel.namelist()}
    strays = sorted(t for t in tops if not t.startswith(("defect_", "defect-")))
    if strays:
        problems.append(f"{built.wheel.name}: carries more than the defect_* packages: {strays}")
    with tarfile.open(built.sdist) as sdist:
        names = {name.split("/", 1)[-1] for name in sdist.getnames()}
    missing = [n for n in SDIST_NEEDS if n not in names]
    if missing:
        problems.append(f"{built.sdist.name}: lacks {missing}")
    twine = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(built.sdist), str(built.wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    if twine.returncode != 0:
        problems.append(f"twine check: {(twine.stdout + twine.stderr).strip()[-1500:]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree to check")
    parser.add_argument("--out", type=Path, help="keep the built files here (else temporary)")
    parser.add_argument(
        "--no-registry", action="store_true", help="skip installing the wheel and initialize"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="defect-release-") as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        try:
            problems = version_problems(args.root) + registry_check.check_manifest(args.root)
            if not problems:
                built = build_artefacts(args.root, out)
                problems = artefact_problems(built, package_version(args.root))
                print(f"release_check: built {built.sdist.name} and {built.wheel.name}")
        except registry_check.CheckError as exc:
            problems = [str(exc)]
        for problem in problems:
            print(f"release_check: {problem}", file=sys.stderr)
        if problems:
            return 1
        print("release_check: one version, a valid manifest, twine check passed")
        if args.no_registry:
            return 0
        return registry_check.main(["--wheel", str(built.wheel), "--root", str(args.root)])


if __name__ == "__main__":
    sys.exit(main())
