# Two entry points, both safe to run twice on a fresh Debian machine with Python 3.11, Java 17 and Maven:
#   make demo   - set up, then run the main job (gateway demo on the embedded cluster, then its Spark stage)
#   make test   - set up, fetch Apache Kafka and Spark's Kafka source from Maven Central, run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MVN    ?= mvn -q -B
KAFKA_LIB := tests/kafka/target/lib/.fetched
SPARK_LIB := tests/spark/target/lib/.fetched
PEERS_LIB := tests/peerwriters/target/lib/.fetched
FAKE_GCS_VERSION := v1.56.1
AZURITE_VERSION  := 3.37.0
FAKE_GCS := tests/gcs/target/bin/fake-gcs-server
AZURITE  := tests/azure/target/node_modules/azurite/dist/src/blob/main.js

.PHONY: demo test bench setup system kafka spark-kafka peer-writers emulators lint

demo: setup
	$(BIN)/gateway demo

test: setup kafka spark-kafka peer-writers emulators
	bash .ci/test

bench: setup kafka spark-kafka
	$(BIN)/gateway bench $(BENCH_ARGS)

setup: system $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,testing]' --group test --group bench --group dev
	touch $(STAMP)

# Apache Kafka's broker (KRaft) and its dependencies, copied from Maven Central (cached in ~/.m2).
kafka: $(KAFKA_LIB)
$(KAFKA_LIB): tests/kafka/pom.xml
	$(MVN) -f tests/kafka/pom.xml package
	touch $@

# Spark's own Kafka source, for the version of PySpark installed, the yardstick for hybrid-kafka.
spark-kafka: $(SPARK_LIB)
$(SPARK_LIB): tests/spark/pom.xml $(STAMP)
	$(MVN) -f tests/spark/pom.xml package -Dspark.version=$$($(BIN)/python -c 'import pyspark; print(pyspark.__version__)')
	touch $@

# bakdata's serde and AWS's payload offloading, run by the peer-format tests to write their formats;
# GroupCommitter (Apache kafka-clients) commits and reads group offsets for the commit-metadata tests.
peer-writers: $(PEERS_LIB)
$(PEERS_LIB): tests/peerwriters/pom.xml $(wildcard tests/peerwriters/src/main/java/gateway/peers/*.java)
	$(MVN) -f tests/peerwriters/pom.xml package
	touch $@

# The GCS and Azure Blob emulators the store tests start (like moto for S3): fake-gcs-server built from its Go
# module, Azurite from npm, each into a git-ignored folder; nothing is done when both are there.
emulators: $(FAKE_GCS) $(AZURITE)
$(FAKE_GCS):
	GOBIN=$(CURDIR)/tests/gcs/target/bin go install github.com/fsouza/fake-gcs-server@$(FAKE_GCS_VERSION)
$(AZURITE):
	npm install --prefix tests/azure/target --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION)

# redis-server comes from Debian; the tests and the demo start their own instance on a free port.
system:
	@command -v redis-server >/dev/null 2>&1 || [ -x /usr/sbin/redis-server ] || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }

lint: setup
	$(BIN)/ruff check gateway stores tests benchmarks
	$(BIN)/ruff format --check gateway stores tests benchmarks
	$(BIN)/mypy
