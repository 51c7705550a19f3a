"""How `make images` makes its inputs (tools/images.py), checked without a container engine:
the Debian mirror comes from apt's own sources, the base's tag changes with its recipe only,
and the wheelhouse lists the package's own dependencies at the lock's versions and no test
tool. tests/containers builds the images for real."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement
from tools import images

from tests.conftest import REPO


def test_the_mirror_is_read_from_a_deb822_source(tmp_path):
    sources = tmp_path / "debian.sources"
    sources.write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
    )
    assert images.apt_mirror((tmp_path / "missing", sources)) == "http://mirror.example/debian"


def test_the_mirror_is_read_from_a_one_line_source(tmp_path):
    sources = tmp_path / "sources.list"
    sources.write_text(
        "# a comment\ndeb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64] http://mirror.example/debian bookworm main\n"
    )
    assert images.apt_mirror((sources,)) == "http://mirror.example/debian"


def test_no_mirror_is_an_error_naming_the_files(tmp_path):
    missing = tmp_path / "none.list"
    try:
        images.apt_mirror((missing,))
    except images.EngineUnavailable as exc:
        assert str(missing) in str(exc)
    else:
        raise AssertionError("no error")


def test_the_base_tag_follows_its_recipe():
    one = images.base_tag("http://a.example/debian")
    assert one == images.base_tag("http://a.example/debian")
    assert one != images.base_tag("http://b.example/debian")
    assert one.startswith(f"{images.BASE_REPOSITORY}:{images.SUITE}-")


def test_the_wheelhouse_holds_the_packages_dependencies_at_the_locks_versions():
    wanted = images.closure()
    pins = images.lock_pins()
    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dev_tools = {Requirement(r).name.lower() for r in dev["dev"]}
    assert {"torch", "kfp", "mlflow", "psycopg2-binary", "boto3"} <= wanted
    assert not wanted & dev_tools, wanted & dev_tools
    assert "pytest" not in wanted and "ruff" not in wanted
    # everything but what pip freeze leaves out of a lock (setuptools) is pinned there
    assert wanted - pins.keys() <= {"setuptools"}


def test_local_images_are_named_for_the_package_version():
    from shdh import __version__

    assert images.local_image("runtime") == f"localhost/shdh:{__version__}"
    assert images.local_image("gpu") == f"localhost/shdh:{__version__}-cuda"
