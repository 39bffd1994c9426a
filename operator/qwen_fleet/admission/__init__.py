"""A validating admission webhook that runs the planner's checks at ``kubectl apply``: what the CRD's schema and
CEL cannot know (the weights do not fit the GPU, the tensor size does not divide the heads) is refused with the
very message the reconcile would put in the ``Stalled`` condition. ``review`` decides (pure); ``server`` serves
it over TLS from the operator process."""

from qwen_fleet.admission.review import decide, review

__all__ = ["decide", "review"]
