"""The payload store settings of the Spark reader and sink, and the credentials the ``gateway`` command reads.

GCS's and Azure's options are declared beside their stores (``stores.blob.settings``).
"""

from __future__ import annotations

from gateway.settings._kinds import BoolSetting, TextSetting


def _text(key: str, doc: str, default: str | None = None, *, spark: bool = True, secret: bool = False) -> TextSetting:
    return TextSetting(key, default, doc, spark=key if spark else None, secret=secret)


REDIS_URL = _text("redis.url", "the Redis store's URL (redis:// or rediss://)", secret=True)
REDIS_PREFIX = _text("redis.prefix", "key prefix of the payloads", "gw")
REDIS_NAME = _text("redis.name", "the store's name in envelopes", "redis")
REDIS_USERNAME = _text("redis.username", "Redis ACL user (the gateway command)", spark=False, secret=True)
REDIS_PASSWORD = _text("redis.password", "Redis password (the gateway command)", spark=False, secret=True)
S3_ENDPOINT = _text("s3.endpoint", "S3 endpoint URL (default: AWS)")
S3_BUCKET = _text("s3.bucket", "the S3 store's bucket")
S3_PREFIX = TextSetting("s3.prefix", "gw/", "key prefix of the payloads (empty: none)", spark="s3.prefix", empty=True)
S3_REGION = _text("s3.region", "S3 region (default: boto3's configuration)")
S3_ACCESS_KEY = _text("s3.access.key", "S3 access key (with s3.secret.key)", secret=True)
S3_SECRET_KEY = _text("s3.secret.key", "S3 secret key", secret=True)
S3_NAME = _text("s3.name", "the store's name in envelopes", "s3")
S3_PATH_STYLE = BoolSetting("s3.path.style", True, "path-style bucket addressing", spark="s3.path.style")
S3_CA_BUNDLE = _text("s3.ca.bundle", "the PEM CA file an HTTPS endpoint is verified with", secret=True)
AZURE_CONNECTION_STRING = _text(
    "azure.connection.string", "the Azure Blob connection string (holds the account key)", spark=False, secret=True
)
ENCRYPTION_KEYRING = _text("encryption.keyring", "env (GATEWAY_KEYRING_* on each executor) or a key ring file")
KMS_KEY = _text("encryption.kms.key", "the AWS KMS key id, ARN or alias")
KMS_REGION = _text("encryption.kms.region", "KMS region")
KMS_ENDPOINT = _text("encryption.kms.endpoint", "KMS endpoint URL")
KMS_ACCESS_KEY = _text("encryption.kms.access.key", "KMS access key (with encryption.kms.secret.key)")
KMS_SECRET_KEY = _text("encryption.kms.secret.key", "KMS secret key")

REDIS_AND_S3: tuple[TextSetting | BoolSetting, ...] = (
    REDIS_URL,
    REDIS_PREFIX,
    REDIS_NAME,
    S3_ENDPOINT,
    S3_BUCKET,
    S3_PREFIX,
    S3_REGION,
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    S3_NAME,
    S3_PATH_STYLE,
    S3_CA_BUNDLE,
)
"""The Spark options of the Redis and S3 stores."""
ENCRYPTION: tuple[TextSetting, ...] = (
    ENCRYPTION_KEYRING,
    KMS_KEY,
    KMS_REGION,
    KMS_ENDPOINT,
    KMS_ACCESS_KEY,
    KMS_SECRET_KEY,
)
"""The Spark options of the key provider."""
COMMAND_CREDENTIALS: tuple[TextSetting, ...] = (
    REDIS_URL,
    REDIS_USERNAME,
    REDIS_PASSWORD,
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    S3_CA_BUNDLE,
    AZURE_CONNECTION_STRING,
)
"""What the ``gateway`` command takes from ``--command-config`` or ``GATEWAY_*`` besides Kafka settings."""
