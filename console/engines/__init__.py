"""The plan handed to other engines: Prometheus rule files and Kubernetes (KEDA) objects.

Pure, as the plan: functions return documents as dicts and lists, and the commands write them. Kept out of
`console.plan` because they read the fleet's flags and the PromQL builders, which the plan knows nothing of.
"""
