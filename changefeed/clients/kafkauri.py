"""Kafka TLS and SASL: TiCDC's sink-uri parameters mapped onto librdkafka's settings, in one place.

Every Kafka client changefeed makes (the sink's producer and admin client, the ``kafka`` input's
consumers, the broker preflight) adds `KafkaSecurity.client_config` to its librdkafka settings;
this module only builds a dict and never imports confluent-kafka.

TiCDC's parameters (``kafka://HOST:PORT/TOPIC?...``) and what they become:

==========================  ============================================================
``enable-tls=true``         ``security.protocol`` SSL (or SASL_SSL), the system's CAs
``ca=FILE``                 ``ssl.ca.location`` (and TLS on, as TiCDC does)
``cert=FILE``/``key=FILE``  ``ssl.certificate.location`` / ``ssl.key.location`` (a client certificate)
``insecure-skip-verify``    ``enable.ssl.certificate.verification=false`` and no host name check
``sasl-mechanism``          ``sasl.mechanism``: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
``sasl-user``               ``sasl.username``
``sasl-password``           ``sasl.password``; or ``sasl-password-env=NAME`` / ``sasl-password-file=PATH``
==========================  ============================================================

``security.protocol`` is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL from whether TLS and SASL are
on; with no parameter at all nothing is added (librdkafka's PLAINTEXT). As in TiCDC,
``enable-tls=false`` with a ``ca``/``cert``/``key`` is an error, and so is a half-given SASL setup.
The password is read when the parameters are (a missing variable or an unsafe file fails then),
and `KafkaSecurity`'s repr never shows it; `changefeed.secrets.mask_secrets` masks
``sasl-password=`` and ``sasl.password`` in any text.

`KafkaURI` is the one parser of the URI itself (servers, topic, parameters), for all who read one: the
sink's config (`changefeed.config`), ``changefeed apply --from`` (a source) and ``changefeed check
--broker``. Each of them keeps its own set of accepted parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

from ..errors import ConfigError, true_false
from ..secrets import mask_secrets, resolve_password

__all__ = [
    "KAFKA_SECURITY_PARAMS",
    "KAFKA_URI_FORM",
    "KAFKA_WRITE_PARAMS",
    "SASL_MECHANISMS",
    "KafkaSecurity",
    "KafkaURI",
]

#: The sink-uri / data source parameters read here (TiCDC's names, plus the password sources).
KAFKA_SECURITY_PARAMS = frozenset(
    {
        "enable-tls",
        "ca",
        "cert",
        "key",
        "insecure-skip-verify",
        "sasl-mechanism",
        "sasl-user",
        "sasl-password",
        "sasl-password-env",
        "sasl-password-file",
    }
)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: Sink-uri parameters that shape the topic and the writing, not the messages: a reader of the
#: topic (``apply --from`` the capture's sink-uri as is) accepts and ignores them.
KAFKA_WRITE_PARAMS = frozenset({"partition-num", "replication-factor", "auto-create-topic", "flush-interval"})
#: The form of a Kafka sink-uri, as errors show it.
KAFKA_URI_FORM = "a kafka sink-uri is kafka://HOST:PORT[,HOST:PORT]/TOPIC?protocol=..."


def _flag(params: Mapping[str, str], name: str) -> bool | None:
    value = params.get(name)
    if value is None:
        return None
    return true_false(value.strip(), f"kafka parameter {name}")


@dataclass(frozen=True)
class KafkaSecurity:
    """TLS and SASL settings of one Kafka connection; ``repr`` never shows the password."""

    tls: bool = False
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    insecure_skip_verify: bool = False
    sasl_mechanism: str | None = None
    sasl_user: str | None = None
    sasl_password: str | None = field(default=None, repr=False)

    @classmethod
    def from_params(cls, params: Mapping[str, str], where: str = "kafka") -> KafkaSecurity:
        """From sink-uri style parameters (other keys are ignored); the password is read now."""
        enable = _flag(params, "enable-tls")
        ca, cert, key = (params.get(k) or None for k in ("ca", "cert", "key"))
        if enable is False and (ca or cert or key):
            raise ConfigError(f"{where}: enable-tls=false, but ca, cert or key is given (they are TLS files)")
        if bool(cert) != bool(key):
            raise ConfigError(f"{where}: cert and key go together (the client certificate and its private key)")
        skip = bool(_flag(params, "insecure-skip-verify"))
        tls = bool(enable) or bool(ca or cert)
        if skip and not tls:
            raise ConfigError(f"{where}: insecure-skip-verify=true without TLS (enable-tls=true or ca=FILE)")

        mechanism = (params.get("sasl-mechanism") or "").strip().upper() or None
        if mechanism is not None and mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"{where}: sasl-mechanism must be one of {', '.join(SASL_MECHANISMS)}, got {params['sasl-mechanism']!r}"
            )
        sources = ("sasl-password", "sasl-password-env", "sasl-password-file")
        inline, env, file = (params.get(k) for k in sources)
        password = (
            resolve_password(
                inline, env=env, file=file, where=where, names=sources, what="SASL password", fallback=None
            )
            or None
        )
        user = params.get("sasl-user") or None
        if mechanism is None and (user or password):
            raise ConfigError(f"{where}: sasl-user/sasl-password need sasl-mechanism ({', '.join(SASL_MECHANISMS)})")
        if mechanism is not None and not (user and password):
            raise ConfigError(
                f"{where}: sasl-mechanism={mechanism} needs sasl-user and a password "
                "(sasl-password, sasl-password-env or sasl-password-file)"
            )
        return cls(tls, ca, cert, key, skip, mechanism, user, password)

    @property
    def security_protocol(self) -> str:
        """librdkafka's ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
        if self.sasl_mechanism:
            return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"
        return "SSL" if self.tls else "PLAINTEXT"

    def client_config(self) -> dict[str, str]:
        """The librdkafka settings to add to a client's configuration (empty when nothing is set)."""
        conf: dict[str, str] = {}
        if not self.tls and not self.sasl_mechanism:
            return conf
        conf["security.protocol"] = self.security_protocol
        if self.ca:
            conf["ssl.ca.location"] = self.ca
        if self.cert:
            conf["ssl.certificate.location"] = self.cert
        if self.key:
            conf["ssl.key.location"] = self.key
        if self.insecure_skip_verify:
            conf["enable.ssl.certificate.verification"] = "false"
            conf["ssl.endpoint.identification.algorithm"] = "none"
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.username"] = self.sasl_user or ""
            conf["sasl.password"] = self.sasl_password or ""
        return conf

    def params(self) -> dict[str, str]:
        """The parameters that give these settings back, the password inline (``sasl-password``: Spark redacts it)."""
        out: dict[str, str] = {}
        if self.tls:
            out["enable-tls"] = "true"
        for name, value in (("ca", self.ca), ("cert", self.cert), ("key", self.key)):
            if value:
                out[name] = value
        if self.insecure_skip_verify:
            out["insecure-skip-verify"] = "true"
        if self.sasl_mechanism:
            out["sasl-mechanism"] = self.sasl_mechanism
            out["sasl-user"] = self.sasl_user or ""
            out["sasl-password"] = self.sasl_password or ""
        return out


@dataclass(frozen=True)
class KafkaURI:
    """``kafka://HOST:PORT[,HOST:PORT]/TOPIC?name=value&...`` split into its parts, the parameters as written.

    Only the form is checked here (a ``kafka`` scheme, servers, a topic without ``/``, no parameter
    twice); which parameters are accepted is the reader's rule, and the TLS/SASL ones are read by
    `KafkaSecurity.from_params`. ``params`` may hold ``sasl-password``: no repr.
    """

    servers: str
    topic: str  # '' when the URI names none (a reader that does not need one: ``check --broker``)
    params: dict[str, str] = field(repr=False)

    @classmethod
    def parse(cls, uri: str, *, need_topic: bool = True, form: str = KAFKA_URI_FORM) -> KafkaURI:
        """Split ``uri``; a URI of another form is an error saying ``form`` and the URI, its secrets masked."""
        parts = urlsplit(uri)
        topic = parts.path.strip("/")
        if parts.scheme.lower() != "kafka" or not parts.netloc or "/" in topic or (need_topic and not topic):
            raise ConfigError(f"{form}, got {mask_secrets(uri)!r}")
        params: dict[str, str] = {}
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key in params:
                raise ConfigError(f"sink-uri parameter {key!r} given twice")
            params[key] = value
        return cls(parts.netloc, topic, params)
