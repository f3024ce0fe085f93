"""The consumer's sans-IO core: assembler, offset tracker, commit translator and the record pipeline.

Pure code fed records and returning events; no sockets, threads or clocks. The Kafka consumer and
the Spark reader drive it.
"""
