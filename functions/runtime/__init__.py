"""Turns CloudEvents into level-triggered reconcile calls: registry, dispatch, HTTP apps."""
