"""The training API: a REST service, a job queue and a CLI in front of the training-job CRs.

Platforms that keep their own front end talk to this service instead of to Kubernetes: it
turns a platform-neutral request into a job CR of any kind of the framework table, reads the
CRs back as the only source of truth, and queues jobs by creating them suspended.
"""
