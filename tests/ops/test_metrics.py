"""The metrics endpoint serves the changefeed metrics over real HTTP, in Prometheus text format."""

from __future__ import annotations

import urllib.request
import uuid
from pathlib import Path

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from changefeed.capture.binlog import file_capture
from changefeed.codec import CodecOptions
from changefeed.errors import SinkError
from changefeed.model import Resolved
from changefeed.model.tso import compose_tso
from changefeed.ops import metrics
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.sink.mysql import MySQLSink
from changefeed.testing import Broker, free_port

BINLOG = Path(__file__).resolve().parents[1] / "fixtures/binlog/full"
DASHBOARD = Path(__file__).resolve().parents[2] / "docs/grafana-dashboard.json"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_metrics_endpoint_serves_what_was_recorded() -> None:
    events = list(file_capture(BINLOG).events())
    inserts_before = _value("changefeed_events_total", kind="insert", table="cf.ints")
    server = metrics.start_metrics_server(free_port("127.0.0.1"), addr="127.0.0.1")
    try:
        metrics.set_info(changefeed="test-cf", job="capture", sink="storage")
        rows = metrics.record_events(events)
        checkpoint = compose_tso(1_700_000_000_000)
        metrics.observe_batch("capture", 0.42, checkpoint, rows=rows)
        metrics.observe_batch("capture", 1.0, ok=False)
        metrics.sink_error("mysql", retried=True)
        metrics.sink_error("mysql", retried=False)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    samples = _samples(text)
    inserts = sum(1 for e in events if getattr(e, "op", None) == "insert" and e.table == "ints")
    assert samples[("changefeed_events_total", (("kind", "insert"), ("table", "cf.ints")))] == inserts_before + inserts
    resolved = sum(1 for e in events if isinstance(e, Resolved))
    assert samples[("changefeed_events_total", (("kind", "resolved"), ("table", "")))] >= resolved
    assert samples[("changefeed_checkpoint_ts", (("job", "capture"),))] == checkpoint
    assert samples[("changefeed_checkpoint_timestamp_seconds", (("job", "capture"),))] == 1_700_000_000
    assert samples[("changefeed_checkpoint_lag_seconds", (("job", "capture"),))] > 0
    assert samples[("changefeed_batch_duration_seconds_count", (("job", "capture"),))] >= 1
    assert samples[("changefeed_batches_total", (("job", "capture"), ("outcome", "failed")))] >= 1
    assert samples[("changefeed_sink_errors_total", (("kind", "fatal"), ("sink", "mysql")))] >= 1
    assert samples[("changefeed_sink_retries_total", (("sink", "mysql"),))] >= 1
    assert ("changefeed_info", (("changefeed", "test-cf"), ("job", "capture"), ("sink", "storage"))) in samples
    assert any(name == "process_cpu_seconds_total" for name, _ in samples)
    assert rows == sum(1 for e in events if getattr(e, "kind", "") == "row")


def test_dashboard_queries_name_existing_metrics() -> None:
    """The sample Grafana dashboard is valid JSON and only queries metrics this module defines."""
    dashboard = orjson.loads(DASHBOARD.read_bytes())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert exprs
    defined = {name for family in text_string_to_metric_families(metrics.scrape()) for name in [family.name]}
    defined |= {f"{n}_total" for n in defined} | {f"{n}_{s}" for n in defined for s in ("bucket", "sum", "count")}
    for expr in exprs:
        used = {word for word in expr.replace("(", " ").replace(")", " ").replace("[", " ").replace("{", " ").split()
                if word.startswith("changefeed_")}  # fmt: skip
        assert used and used <= defined, (expr, used - defined)


def test_sinks_report_delivery_latency_and_retries(broker: Broker) -> None:
    """A real Kafka sink observes one latency per acknowledged message; a MySQL sink counts its retries."""
    events = list(file_capture(BINLOG).events())
    delivered = _value("changefeed_sink_delivery_latency_seconds_count", sink="kafka")
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    config = KafkaSinkConfig(broker.bootstrap_servers, topic, CodecOptions(protocol="canal-json"), partition_num=1)
    with KafkaSink(config) as sink:
        sink.write(events)
        sink.flush()
        sent = sink.messages_sent
    assert sent > 0 and _value("changefeed_sink_delivery_latency_seconds_count", sink="kafka") == delivered + sent
    assert _value("changefeed_sink_delivery_latency_seconds_sum", sink="kafka") > 0

    retried = _value("changefeed_sink_retries_total", sink="mysql")
    port = free_port("127.0.0.1")  # nothing listens: connection refused is transient, so retried
    with pytest.raises(SinkError):
        MySQLSink(f"mysql://root@127.0.0.1:{port}/", max_retries=2, retry_backoff=0.01).open()
    assert _value("changefeed_sink_retries_total", sink="mysql") == retried + 2
