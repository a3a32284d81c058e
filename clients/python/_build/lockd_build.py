"""The lockd client's build backend (PEP 517 and PEP 660), on the standard
library alone.

`pip install ./clients/python` needs a build backend. setuptools would have
to come from the package index first (pip builds in an isolated
environment), so an install could not work where only the standard library
is at hand; the client is a single pure-Python package, and writing its
wheel is a zip file with three small text files beside it. Its metadata is
read from pyproject.toml's [project] table, its version from
lockd.__version__.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "lockd"


def _project():
    """The [project] table's plain string fields, and the version."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = text.split("[project]", 1)[1].split("\n[", 1)[0]
    fields = dict(re.findall(r'^([\w-]+) = "([^"]*)"$', table, re.M))
    with open(os.path.join(ROOT, PACKAGE, "__init__.py"), encoding="utf-8") as f:
        fields["version"] = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)
    return fields


def _dist(p):
    return "%s-%s" % (re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"])


def _metadata(p):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (
        "Metadata-Version: 2.1\n"
        "Name: %s\nVersion: %s\nSummary: %s\nRequires-Python: %s\n"
        "Description-Content-Type: text/markdown\n\n%s"
        % (p["name"], p["version"], p.get("description", ""), p.get("requires-python", ""), readme)
    )


def _sources():
    """The package's files, as (path in the wheel, path on disk)."""
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, PACKAGE)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".typed")):
                full = os.path.join(d, name)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _wheel(directory, entries):
    """Writes a wheel of entries ((name, bytes) pairs) and its dist-info."""
    p = _project()
    dist = _dist(p)
    info = dist + ".dist-info"
    entries = list(entries) + [
        (info + "/METADATA", _metadata(p).encode()),
        (info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: lockd_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (info + "/top_level.txt", (PACKAGE + "\n").encode()),
    ]
    record = []
    name = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries:
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
        record.append(info + "/RECORD,,")
        z.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for path, full in _sources():
        with open(full, "rb") as f:
            entries.append((path, f.read()))
    return _wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file puts the checkout on sys.path: edits take effect at once.
    return _wheel(wheel_directory, [("lockd_client.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    dist = _dist(p)
    name = dist + ".tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")), ("README.md", os.path.join(ROOT, "README.md")),
             ("_build/lockd_build.py", os.path.abspath(__file__))] + _sources()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for path, full in files:
            t.add(full, arcname=dist + "/" + path)
        pkg_info = _metadata(p).encode()
        ti = tarfile.TarInfo(dist + "/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return name
