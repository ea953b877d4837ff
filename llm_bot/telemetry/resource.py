"""The name our spans and metrics carry, so a dashboard joins them under one service.

``llm-bot`` unless the standard OpenTelemetry variables name the service
(``OTEL_SERVICE_NAME``, or ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``): a deployment that
runs several llm-bots (one per environment, say) tells them apart that way, as with any other
OpenTelemetry service.
"""

from __future__ import annotations

from opentelemetry.sdk.resources import SERVICE_NAME as SERVICE_NAME_KEY
from opentelemetry.sdk.resources import OTELResourceDetector, Resource

SERVICE_NAME = "llm-bot"


def service_resource() -> Resource:
    """``Resource.create`` reads the variables, but attributes given to it win over them."""
    if SERVICE_NAME_KEY in OTELResourceDetector().detect().attributes:
        return Resource.create()
    return Resource.create({SERVICE_NAME_KEY: SERVICE_NAME})
