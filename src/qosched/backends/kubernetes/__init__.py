"""qosched on a Kubernetes cluster: a custom scheduler driven by the same cluster policies.

The official client (``pip install 'qosched[kubernetes]'``) is imported lazily, so qosched
without it still works; :func:`qosched.backends.kubernetes.kube.require` says which extra is
missing when a Kubernetes command is used without it.
"""
