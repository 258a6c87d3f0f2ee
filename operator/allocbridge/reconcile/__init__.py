"""Kopf handlers: Allocation -> Pod, and the pod's life -> the Allocation's status."""
