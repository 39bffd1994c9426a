"""Our API group and version, in one place.

The CRDs, the models' ``apiVersion``, the chart-facing RBAC rules, our label and annotation keys and the batch
runner all read these. A module of its own, importing nothing: the runner in a batch Job (batchrun/) names the
QwenBatch status path with them and loads no pydantic.
"""

GROUP = "qwenfleet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
