"""``kafka.*`` options: Spark's refusals, and Java-client names turned into librdkafka's.

A job moving from ``format("kafka")`` brings ``kafka.*`` options written for Apache Kafka's Java
client. librdkafka shares most names, but a Java-only one either fails on an executor, long after
the query started, with "No such configuration property", or is silently meaningless. So each
name is decided here, on the driver, before any task runs: the keys Spark's own source refuses
are refused with Spark's reason; the common Java-only keys are translated when the meaning is
the same (``sasl.jaas.config`` with a username and password, a PEM trust store, the default
partitioner) and refused otherwise with the librdkafka names to use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gateway.errors import ConfigurationError


class KafkaOptionError(ConfigurationError, ValueError):
    """A ``kafka.*`` option Spark's source refuses, or a Java-client option librdkafka cannot take."""


_NOT_CONSUMED = (
    "Structured Streaming manages which offsets are consumed internally, rather than relying on the"
    " kafkaConsumer to do it"
)
SPARK_REFUSED_SOURCE: Mapping[str, str] = {
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option 'startingOffsets'"
        f" to 'earliest' or 'latest' to specify where to start. {_NOT_CONSUMED} (Spark's Kafka source refuses"
        " it too)"
    ),
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte arrays with"
        " ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the keys"
        " (Spark's Kafka source refuses it too)"
    ),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte arrays with"
        " ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the values"
        " (Spark's Kafka source refuses it too)"
    ),
    "enable.auto.commit": (
        f"Kafka option 'enable.auto.commit' is not supported: the source never commits; {_NOT_CONSUMED}"
        " (Spark's Kafka source refuses it too)"
    ),
    "interceptor.classes": (
        "Kafka option 'interceptor.classes' is not supported: records are returned as they are in Kafka"
        " (Spark's Kafka source refuses it too; librdkafka has no Java interceptors)"
    ),
}
"""The consumer keys Spark's ``KafkaSourceProvider.validateGeneralOptions`` refuses, with its reasons."""

SPARK_REFUSED_SINK: Mapping[str, str] = {
    "key.serializer": (
        "Kafka option 'key.serializer' is not supported as keys are serialized with ByteArraySerializer"
        " (Spark's Kafka sink refuses it too): write a binary or string key column"
    ),
    "value.serializer": (
        "Kafka option 'value.serializer' is not supported as value are serialized with ByteArraySerializer"
        " (Spark's Kafka sink refuses it too): write a binary or string value column"
    ),
    "interceptor.classes": (
        "Kafka option 'interceptor.classes' names Java classes: librdkafka has no Java interceptors"
        " (its C plugins load through kafka.plugin.library.paths)"
    ),
}
"""The producer keys Spark's sink refuses (``validateSinkOptions``), plus Java interceptors."""

_PARTITIONERS = "random, consistent, consistent_random, murmur2, murmur2_random, fnv1a, fnv1a_random"
_JAVA_PARTITIONERS = {
    # the Java client's default: murmur2 of the key (the same partition as murmur2_random for keyed
    # records); records without a key spread over the partitions in both
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": "murmur2_random",
}
_SIMPLE_RENAMES = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "max.request.size": "message.max.bytes",
}
"""Java names whose librdkafka twin means the same, under another name."""

_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)\b(?P<rest>.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r"""([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^\s;]+))""")
_PASSWORD_MODULES = ("PlainLoginModule", "ScramLoginModule")


def _refuse(name: str, reason: str) -> KafkaOptionError:
    return KafkaOptionError(f"option kafka.{name}: {reason}")


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``(login module class, options)`` of a one-module ``sasl.jaas.config``."""
    match = _JAAS.match(text)
    if match is None:
        raise _refuse("sasl.jaas.config", "is not '<LoginModule> required key=\"value\" ...;'")
    options = {
        m.group(1): next(g for g in (m.group(2), m.group(3), m.group(4)) if g is not None).replace('\\"', '"')
        for m in _JAAS_OPTION.finditer(match.group("rest"))
    }
    return match.group("module"), options


def _jaas(value: str, conf: dict[str, str]) -> None:
    module, options = parse_jaas(value)
    short = module.rsplit(".", 1)[-1]
    if short in _PASSWORD_MODULES and "username" in options and "password" in options:
        for java, ours in (("username", "sasl.username"), ("password", "sasl.password")):
            if conf.get(ours, options[java]) != options[java]:
                raise _refuse("sasl.jaas.config", f"its {java} differs from kafka.{ours}; give one of them")
            conf[ours] = options[java]
        return
    if short == "OAuthBearerLoginModule":
        hint = (
            "librdkafka takes OAUTHBEARER as kafka.sasl.oauthbearer.method=oidc with"
            " kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret and"
            " kafka.sasl.oauthbearer.token.endpoint.url (or kafka.sasl.oauthbearer.config)"
        )
    elif short == "Krb5LoginModule":
        hint = "librdkafka takes Kerberos as kafka.sasl.kerberos.keytab and kafka.sasl.kerberos.principal"
    else:
        hint = "librdkafka takes PLAIN and SCRAM credentials as kafka.sasl.username and kafka.sasl.password"
    raise _refuse("sasl.jaas.config", f"{module} cannot be translated; {hint}")


def _truststore(conf: dict[str, str], store_type: str) -> None:
    location = conf.pop("ssl.truststore.location", None)
    password = conf.pop("ssl.truststore.password", None)
    certificates = conf.pop("ssl.truststore.certificates", None)
    if location is None and certificates is None and password is None:
        return
    if store_type != "PEM":
        raise _refuse(
            "ssl.truststore.location",
            f"librdkafka cannot read a {store_type} trust store (the Java default is JKS): export the CA"
            " certificates to PEM (keytool -exportcert -rfc) and set kafka.ssl.ca.location to the file"
            " (or kafka.ssl.ca.pem to its text)",
        )
    if password is not None:
        raise _refuse("ssl.truststore.password", "a PEM trust store has no password (kafka.ssl.ca.location)")
    if location is not None:
        conf["ssl.ca.location"] = location
    if certificates is not None:
        conf["ssl.ca.pem"] = certificates


def _keystore(conf: dict[str, str], store_type: str | None) -> None:
    key = conf.pop("ssl.keystore.key", None)
    chain = conf.pop("ssl.keystore.certificate.chain", None)
    if key is not None or chain is not None:
        if store_type not in (None, "PEM"):
            raise _refuse("ssl.keystore.key", f"goes with ssl.keystore.type=PEM, not {store_type}")
        if key is not None:
            conf["ssl.key.pem"] = key
        if chain is not None:
            conf["ssl.certificate.pem"] = chain
        return
    if store_type in (None, "PKCS12"):
        return  # librdkafka's ssl.keystore.location / .password are a PKCS#12 file, as in Java
    if "ssl.keystore.location" not in conf:
        return
    if store_type == "PEM":
        hint = "give the certificate and the key as kafka.ssl.certificate.location and kafka.ssl.key.location"
    else:
        hint = (
            f"librdkafka cannot read a {store_type} key store: convert it to PKCS#12 (keytool -importkeystore"
            " -deststoretype PKCS12) for kafka.ssl.keystore.location / kafka.ssl.keystore.password, or to PEM"
            " for kafka.ssl.certificate.location and kafka.ssl.key.location"
        )
    raise _refuse("ssl.keystore.location", f"ssl.keystore.type={store_type}: {hint}")


def translate(config: Mapping[str, str], refused: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` options (prefix stripped) as librdkafka takes them; raise on what it cannot."""
    conf = {k: str(v) for k, v in config.items()}
    for name in sorted(conf):
        if name in refused:
            raise _refuse(name, refused[name])
    for java, ours in _SIMPLE_RENAMES.items():
        if java in conf:
            if ours in conf and conf[ours] != conf[java]:
                raise _refuse(java, f"is librdkafka's {ours}, which is set to another value")
            conf[ours] = conf.pop(java)
    if "sasl.jaas.config" in conf:
        _jaas(conf.pop("sasl.jaas.config"), conf)
    _truststore(conf, conf.pop("ssl.truststore.type", "JKS").strip().upper())
    keystore_type = conf.pop("ssl.keystore.type", None)
    _keystore(conf, None if keystore_type is None else keystore_type.strip().upper())
    if "partitioner.class" in conf:
        java = conf.pop("partitioner.class").strip()
        if java not in _JAVA_PARTITIONERS:
            raise _refuse(
                "partitioner.class",
                f"{java} is a Java class; librdkafka chooses among built-in partitioners with kafka.partitioner"
                f" ({_PARTITIONERS}; murmur2_random places keyed records as the Java client does)",
            )
        conf.setdefault("partitioner", _JAVA_PARTITIONERS[java])
    if conf.get("ssl.endpoint.identification.algorithm") == "":
        conf["ssl.endpoint.identification.algorithm"] = "none"  # the Java client's "" turns the check off
    return conf
