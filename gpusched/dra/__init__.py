"""Dynamic Resource Allocation's pure logic, no I/O: device selectors in CEL (cel.py) and
the structured allocator that picks devices for ResourceClaims (allocator.py)."""
