//! A zoned buddy allocator, generic over the memory model.
