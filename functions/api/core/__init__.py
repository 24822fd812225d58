"""Pure rules of the training API: request models, CR translation, queue order, OpenAPI.

Nothing here does I/O; the Flask app, the queue handler and the CLI call these functions.
"""
