"""Reads Prometheus text exposition from stdin with prometheus_client's parser (the
Prometheus project's reference Python client) and prints every sample as JSON:
[{"name": ..., "labels": {...}, "value": ...}, ...]. A malformed exposition raises."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families

samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        samples.append({"name": sample.name, "labels": sample.labels, "value": sample.value})
json.dump(samples, sys.stdout)
