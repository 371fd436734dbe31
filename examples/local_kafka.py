"""A single-node Apache Kafka broker on loopback, for the Kafka example and the tests.

It runs Apache Kafka's own broker (the jars `python maven/fetch.py kafka-broker` puts in
`maven/jars/kafka-broker`) in KRaft mode, one process being broker and controller, with
its log in a folder of the caller's. `stop()` ends it cleanly, `kill()` with SIGKILL;
`start()` again brings the same broker back on the same port and data.

    with LocalKafka("/tmp/kafka") as kafka:
        kafka.create_topic("events", partitions=4)
        kafka.produce("events", [(b"key", b"value", 1_000)])   # (key, value, timestamp ms)
        records = kafka.records("events")                       # every record, per partition
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple, Self

ROOT = Path(__file__).resolve().parent.parent
# the clients' own log lines (a broker being restarted refuses connections for a while) go to
# Python's logging instead of stderr
CLIENT_LOG = logging.getLogger("local_kafka.client")


class Record(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def _maven() -> Any:
    """`maven/fetch.py`, which fetches jars from Maven Central into `maven/jars`."""
    sys.path.insert(0, str(ROOT / "maven"))
    try:
        import fetch
    finally:
        sys.path.remove(str(ROOT / "maven"))
    return fetch


def broker_jars() -> list[Path]:
    """The broker's jars, fetched with Maven when missing."""
    return _maven().fetch("kafka-broker")


def installed_minor() -> str:
    """The installed pyspark's minor version (4.2 for 4.2.1)."""
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:2])


def connector_version(minor: str | None = None) -> str | None:
    """The version of Spark's Kafka connector fetched for pyspark `minor` (default: the
    installed one's), or None where Maven Central as served here has none."""
    return _maven().CONNECTORS.get(minor or installed_minor())


def connector_jars(minor: str | None = None) -> list[Path] | None:
    """Spark's Kafka connector and its dependencies for pyspark `minor` (default: the
    installed one's), fetched with Maven when missing; None where none is served."""
    bundle = _maven().connector_bundle(minor or installed_minor())
    return None if bundle is None else _maven().fetch(bundle)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaTopics:
    """Topics of the broker at `bootstrap`: make, grow, produce to and read back."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def client_config(self) -> dict[str, Any]:
        """A confluent_kafka client's settings for this broker."""
        return {"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOG}

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.client_config())

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self._admin()  # kept until the future resolves (a dropped client cancels it)
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=60)
        self._wait_partitions(name, partitions)

    def add_partitions(self, name: str, total: int) -> None:
        """Grow topic `name` to `total` partitions."""
        from confluent_kafka.admin import NewPartitions

        admin = self._admin()
        admin.create_partitions([NewPartitions(name, total)])[name].result(timeout=60)
        self._wait_partitions(name, total)

    def partitions(self, name: str) -> int:
        topic = self._admin().list_topics(name, timeout=30).topics[name]
        return len(topic.partitions) if topic.error is None else 0

    def _wait_partitions(self, name: str, count: int) -> None:
        deadline = time.monotonic() + 60
        while self.partitions(name) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} did not reach {count} partitions")
            time.sleep(0.1)

    def produce(self, topic: str, records: Iterable[tuple[bytes | str | None, bytes | str | None, int]],
                partition_of: Any = None) -> int:
        """Produce (key, value, timestamp ms) records, idempotently, and wait until every one
        is acknowledged; `partition_of(key)` picks a partition (default: Kafka's by key)."""
        from confluent_kafka import Producer

        producer = Producer({**self.client_config(), "enable.idempotence": True,
                             "linger.ms": 20, "batch.num.messages": 10_000})
        failed: list[Any] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failed.append(error)

        count = 0
        for key, value, timestamp in records:
            extra = {} if partition_of is None else {"partition": partition_of(key)}
            while True:
                try:
                    producer.produce(topic, value=value, key=key, timestamp=timestamp, on_delivery=delivered, **extra)
                    break
                except BufferError:
                    producer.poll(0.1)
            count += 1
            if count % 10_000 == 0:
                producer.poll(0)
        remaining = producer.flush(120)
        if remaining or failed:
            raise RuntimeError(f"{remaining} records not acknowledged, {len(failed)} failed: {failed[:3]}")
        return count

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's end offset (the offset the next record will take)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**self.client_config(), "group.id": f"offsets-{uuid.uuid4().hex}"})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                    for p in range(self.partitions(topic))}
        finally:
            consumer.close()

    def records(self, topic: str, *, read_committed: bool = True) -> list[Record]:
        """Every record of `topic` now (each partition read to its end offset)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**self.client_config(), "group.id": f"reader-{uuid.uuid4().hex}",
                             "enable.auto.commit": False,
                             "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
        try:
            count = self.partitions(topic)
            ends = {}
            for p in range(count):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                if high > low:
                    ends[p] = high
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            out: list[Record] = []
            positions = dict.fromkeys(ends, -1)
            deadline = time.monotonic() + 120
            while any(positions[p] + 1 < ends[p] for p in ends):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"reading {topic} did not reach its end offsets {ends}")
                for message in consumer.consume(10_000, timeout=1):
                    if message.error() is not None:
                        continue
                    positions[message.partition()] = message.offset()
                    if message.offset() < ends[message.partition()]:
                        out.append(Record(message.partition(), message.offset(), message.key(), message.value(),
                                          message.timestamp()[1]))
                # transaction markers take offsets no record has: the position is the consumer's
                for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                    if tp.offset >= 0:
                        positions[tp.partition] = max(positions[tp.partition], tp.offset - 1)
            return out
        finally:
            consumer.close()


class LocalKafka(KafkaTopics):
    """A KRaft broker on 127.0.0.1 with its data under `workdir`."""

    def __init__(self, workdir: str | os.PathLike, *, start_timeout: float = 180.0) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.controller_port = _free_port(), _free_port()
        super().__init__(f"127.0.0.1:{self.port}")
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self._formatted = False

    def _properties(self) -> Path:
        path = self.workdir / "server.properties"
        path.write_text(
            "process.roles=broker,controller\n"
            "node.id=1\n"
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}\n"
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}\n"
            "controller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            "inter.broker.listener.name=PLAINTEXT\n"
            f"log.dirs={self.workdir / 'data'}\n"
            "num.partitions=1\n"
            "offsets.topic.replication.factor=1\n"
            "offsets.topic.num.partitions=4\n"
            "transaction.state.log.replication.factor=1\n"
            "transaction.state.log.min.isr=1\n"
            "transaction.state.log.num.partitions=4\n"
            "share.coordinator.state.topic.replication.factor=1\n"
            "share.coordinator.state.topic.min.isr=1\n"
            "group.initial.rebalance.delay.ms=0\n"
            "auto.create.topics.enable=false\n"
            "log.retention.hours=-1\n"
        )
        return path

    def _java(self, main: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(jar) for jar in broker_jars())
        return ["java", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", classpath, main, *args]

    def start(self) -> Self:
        """Start the broker (formatting its storage the first time) and wait until it serves."""
        if self.process is not None and self.process.poll() is None:
            return self
        properties = self._properties()
        if not self._formatted:
            subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", uuid.uuid4().hex[:22], "-c",
                           str(properties)),
                check=True, capture_output=True,
            )
            self._formatted = True
        log = open(self.workdir / "broker.log", "ab")
        self.process = subprocess.Popen(self._java("kafka.Kafka", str(properties)), stdout=log, stderr=log,
                                        start_new_session=True)
        log.close()
        self._wait_serving()
        return self

    def _wait_serving(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.start_timeout
        admin = AdminClient(self.client_config())
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited with {self.process.returncode}: "
                                   f"see {self.workdir / 'broker.log'}")
            try:
                metadata = admin.list_topics(timeout=5)
                if metadata.brokers:
                    return
            except Exception as error:  # noqa: BLE001 - not serving yet, whatever the client says
                CLIENT_LOG.debug("broker %s not serving yet: %s", self.bootstrap, error)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Kafka broker on {self.bootstrap} did not serve within "
                                   f"{self.start_timeout:.0f} s: see {self.workdir / 'broker.log'}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the broker cleanly (SIGTERM, then SIGKILL if it does not end)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
