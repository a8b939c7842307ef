//! The virtually mapped memmap (SPARSEMEM_VMEMMAP) and its hole detectors.
