"""tide's Python SDK: Azure ML's ``MLClient`` for tide servers.

``tide.ml`` mirrors ``azure.ai.ml`` and ``tide.core.exceptions`` mirrors
``azure.core.exceptions``, so code written for Azure ML changes only its
imports and the line that makes the client.
"""

__version__ = "0.1.0"
