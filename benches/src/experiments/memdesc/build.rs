//! Building any memory model at any `struct page` size: the bottom of
//! `memdesc`, imported by the allocator's rows and the sized models above
//! it.

use sparsemem::table::{Classic, Extreme};
use sparsemem::{BuildError, Flat, Layout, MemoryModel, PageLayout, Sparse};
use vmemmap::{Vmemmap, VmemmapOptions};

/// A model type, at any page size, that the lab can build from a layout.
pub trait BuildAt: MemoryModel + Sized + 'static {
    /// Builds the model (`options` only matter to vmemmap models).
    fn build_at(layout: &Layout, options: VmemmapOptions) -> Result<Self, BuildError>;
}

impl<P: PageLayout> BuildAt for Flat<P> {
    fn build_at(layout: &Layout, _: VmemmapOptions) -> Result<Self, BuildError> {
        Flat::<P>::build(layout)
    }
}

impl<P: PageLayout> BuildAt for Sparse<Classic, P> {
    fn build_at(layout: &Layout, _: VmemmapOptions) -> Result<Self, BuildError> {
        Sparse::<Classic, P>::build(layout)
    }
}

impl<P: PageLayout> BuildAt for Sparse<Extreme, P> {
    fn build_at(layout: &Layout, _: VmemmapOptions) -> Result<Self, BuildError> {
        Sparse::<Extreme, P>::build(layout)
    }
}

impl<D: vmemmap::Detector + 'static, P: PageLayout> BuildAt for Vmemmap<D, P> {
    fn build_at(layout: &Layout, options: VmemmapOptions) -> Result<Self, BuildError> {
        Vmemmap::<D, P>::build(layout, options)
    }
}
