"""The overflow policy (pure): the policy model, the admission decision and Retry-After."""
