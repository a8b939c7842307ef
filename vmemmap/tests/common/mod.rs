//! What the vmemmap test files share: every detector, every geometry.

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

/// Every geometry preset.
pub const ALL_GEOMETRIES: [Geometry; 5] = [
    Geometry::X86_64,
    Geometry::ARM64_4K,
    Geometry::ARM64_64K,
    Geometry::IA64,
    Geometry::X86_64_LA57,
];
