"""The container tests: a real Docker engine, the project's runtime image built here
(pipelines/images.py), a real MLflow server with basic authentication and a real S3 server
(SeaweedFS) on loopback.

They run under `make test-containers` (SHDH_TEST_CONTAINERS=1), which builds the image first;
a plain `pytest` leaves them out (they take minutes and a root-started dockerd). Where Docker
cannot be started they are skipped with the reason, except in CI (CI=true), where that fails.
"""

from __future__ import annotations

import os

import pytest

from pipelines import images
from tests.integration.conftest import s3_server  # noqa: F401 (the session's S3 server)

collect_ignore_glob = [] if os.environ.get("SHDH_TEST_CONTAINERS") == "1" else ["test_*.py"]


@pytest.fixture(scope="session")
def engine() -> str:
    """The Docker server's version, after installing and starting it where needed."""
    try:
        return images.ensure_engine()
    except images.EngineUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and no Docker engine: {exc}")
        pytest.skip(f"no Docker engine: {exc}")


@pytest.fixture(scope="session")
def runtime_image(engine) -> str:
    """localhost/shdh:VERSION, built (or reused when nothing it is made of changed)."""
    (built,) = images.build(("runtime",))
    return built.image
