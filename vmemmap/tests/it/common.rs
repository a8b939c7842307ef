//! What the vmemmap test suites share: every detector, every geometry.

use sparsemem::Geometry;

/// Runs `$f::<D>($args)` for every detector this build has (the uffd ones
/// with the `uffd` feature), stopping at the first error.
macro_rules! for_each_detector {
    ($f:ident, $($arg:expr),*) => {(|| {
        $f::<vmemmap::Table>($($arg),*)?;
        $f::<vmemmap::Probe>($($arg),*)?;
        #[cfg(feature = "uffd")]
        {
            $f::<vmemmap::UffdZeroPage>($($arg),*)?;
            $f::<vmemmap::UffdSigbus>($($arg),*)?;
        }
        Ok::<(), String>(())
    })()};
}

/// Runs `$f::<D, P>($args)` for detector `D` at every `struct page`
/// layout `P`, largest first, stopping at the first error.
macro_rules! at_every_page_size {
    ($f:ident, $d:ty, $($arg:expr),*) => {{
        $f::<$d, sparsemem::Page64>($($arg),*)?;
        $f::<$d, sparsemem::Page32>($($arg),*)?;
        $f::<$d, sparsemem::Page16>($($arg),*)?;
        $f::<$d, sparsemem::Page8>($($arg),*)
    }};
}

/// Builds detector `D`'s model at layout `P`, the error naming the size.
pub fn build<D: vmemmap::Detector, P: sparsemem::PageLayout>(
    layout: &sparsemem::Layout,
) -> Result<vmemmap::Vmemmap<D, P>, String> {
    vmemmap::Vmemmap::<D, P>::build(layout, vmemmap::VmemmapOptions::default())
        .map_err(|e| format!("{e} ({}-byte struct page)", P::SIZE))
}

/// Every geometry preset.
pub const ALL_GEOMETRIES: [Geometry; 5] = [
    Geometry::X86_64,
    Geometry::ARM64_4K,
    Geometry::ARM64_64K,
    Geometry::IA64,
    Geometry::X86_64_LA57,
];
