"""The real S3 server of the integration tests (SeaweedFS on loopback), for the bucket check."""

from tests.integration.conftest import s3_server  # noqa: F401  (a fixture, used by name)
