//! The models this build supports, chosen by name once, at the top.
//!
//! The CLI turns a model name into a [`ModelKind`] and hands a generic
//! [`ModelVisitor`] to [`with_model`]; the visitor's `visit` is
//! monomorphised per model, so the measured loops never dispatch per call.

use std::fmt;

use sparsemem::{BuildError, Flat, Layout, SparseClassic, SparseExtreme};
use vmemmap::{VmemmapOptions, VmemmapProbe, VmemmapTable};

/// A memory model the lab can build.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum ModelKind {
    /// FLATMEM.
    Flat,
    /// Classic SPARSEMEM.
    Sparse,
    /// SPARSEMEM_EXTREME.
    SparseExtreme,
    /// VMEMMAP, section table decides.
    VmemmapTable,
    /// VMEMMAP, fault-probed `pfn_valid`.
    VmemmapProbe,
    /// VMEMMAP, userfaultfd zero-page holes.
    #[cfg(feature = "uffd")]
    VmemmapUffd,
    /// VMEMMAP, userfaultfd SIGBUS holes.
    #[cfg(feature = "uffd")]
    VmemmapUffdSigbus,
}

impl ModelKind {
    /// Every model this build supports, in report order.
    pub const ALL: &'static [ModelKind] = &[
        ModelKind::Flat,
        ModelKind::Sparse,
        ModelKind::SparseExtreme,
        ModelKind::VmemmapTable,
        ModelKind::VmemmapProbe,
        #[cfg(feature = "uffd")]
        ModelKind::VmemmapUffd,
        #[cfg(feature = "uffd")]
        ModelKind::VmemmapUffdSigbus,
    ];

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Flat => "flat",
            ModelKind::Sparse => "sparse",
            ModelKind::SparseExtreme => "sparse-extreme",
            ModelKind::VmemmapTable => "vmemmap-table",
            ModelKind::VmemmapProbe => "vmemmap-probe",
            #[cfg(feature = "uffd")]
            ModelKind::VmemmapUffd => "vmemmap-uffd",
            #[cfg(feature = "uffd")]
            ModelKind::VmemmapUffdSigbus => "vmemmap-uffd-sigbus",
        }
    }

    /// Whether the model's memmap is a vmemmap reservation (and so takes
    /// the THP option).
    pub fn is_vmemmap(self) -> bool {
        !matches!(
            self,
            ModelKind::Flat | ModelKind::Sparse | ModelKind::SparseExtreme
        )
    }

    /// Whether a hole costs a caught fault (the probe's SIGSEGV, or the
    /// SIGBUS of userfaultfd's SIGBUS mode), so hole lookups are measured
    /// with fewer iterations.
    pub fn faults_on_holes(self) -> bool {
        match self {
            ModelKind::VmemmapProbe => true,
            #[cfg(feature = "uffd")]
            ModelKind::VmemmapUffdSigbus => true,
            _ => false,
        }
    }

    /// Parses a CLI name.
    pub fn parse(name: &str) -> Result<ModelKind, UnknownModel> {
        ModelKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == name)
            .ok_or_else(|| UnknownModel(name.to_owned()))
    }

    /// Parses a comma-separated list of names.
    pub fn parse_list(names: &str) -> Result<Vec<ModelKind>, UnknownModel> {
        names
            .split(',')
            .map(|n| ModelKind::parse(n.trim()))
            .collect()
    }
}

/// A model is reported by its name (`vmemmap`, `sparse-extreme`, …).
impl serde::Serialize for ModelKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A model name this build does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownModel(pub String);

impl fmt::Display for UnknownModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = ModelKind::ALL.iter().map(|k| k.name()).collect();
        write!(
            f,
            "unknown model `{}` (known: {})",
            self.0,
            known.join(", ")
        )?;
        if !cfg!(feature = "uffd") && self.0.starts_with("vmemmap-uffd") {
            write!(
                f,
                "; build with `--features uffd` for the userfaultfd models"
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownModel {}

/// A model type the lab can build from a layout.
pub trait Buildable: buddy::BuddyModel<Page = sparsemem::Page> + Sized + 'static {
    /// Builds the model (`options` only matter to vmemmap models).
    fn build(layout: &Layout, options: VmemmapOptions) -> Result<Self, BuildError>;
}

macro_rules! buildable {
    ($($t:ty => |$l:ident, $o:ident| $e:expr;)*) => {$(
        impl Buildable for $t {
            fn build($l: &Layout, $o: VmemmapOptions) -> Result<Self, BuildError> {
                $e
            }
        }
    )*};
}

buildable! {
    Flat => |l, _o| Flat::new(l);
    SparseClassic => |l, _o| SparseClassic::new(l);
    SparseExtreme => |l, _o| SparseExtreme::new(l);
    VmemmapTable => |l, o| VmemmapTable::with_options(l, o);
    VmemmapProbe => |l, o| VmemmapProbe::with_options(l, o);
}

#[cfg(feature = "uffd")]
buildable! {
    vmemmap::VmemmapUffd => |l, o| vmemmap::VmemmapUffd::with_options(l, o);
    vmemmap::VmemmapUffdSigbus => |l, o| vmemmap::VmemmapUffdSigbus::with_options(l, o);
}

/// Builds a model of type `M` over `layout` and an allocator of variant
/// `V` over it, as every experiment does.
pub fn build_allocator<M: Buildable, V: buddy::Variant>(
    layout: &Layout,
    options: VmemmapOptions,
    alloc_options: buddy::Options,
) -> Result<buddy::Allocator<M, V>, buddy::AllocError> {
    Ok(buddy::Allocator::new(
        M::build(layout, options)?,
        layout,
        alloc_options,
    )?)
}

/// Work to do with a model type, generic so it is compiled once per model.
pub trait ModelVisitor {
    /// What the work returns.
    type Output;
    /// Does the work; builds the model (once or several times) itself.
    fn visit<M: Buildable>(
        self,
        layout: &Layout,
        options: VmemmapOptions,
    ) -> Result<Self::Output, buddy::AllocError>;
}

/// Runs `visitor` with the model type of `kind`.
pub fn with_model<V: ModelVisitor>(
    kind: ModelKind,
    layout: &Layout,
    visitor: V,
) -> Result<V::Output, buddy::AllocError> {
    with_model_options(kind, layout, VmemmapOptions::default(), visitor)
}

/// As [`with_model`], with options for the vmemmap models.
pub fn with_model_options<V: ModelVisitor>(
    kind: ModelKind,
    layout: &Layout,
    options: VmemmapOptions,
    visitor: V,
) -> Result<V::Output, buddy::AllocError> {
    match kind {
        ModelKind::Flat => visitor.visit::<Flat>(layout, options),
        ModelKind::Sparse => visitor.visit::<SparseClassic>(layout, options),
        ModelKind::SparseExtreme => visitor.visit::<SparseExtreme>(layout, options),
        ModelKind::VmemmapTable => visitor.visit::<VmemmapTable>(layout, options),
        ModelKind::VmemmapProbe => visitor.visit::<VmemmapProbe>(layout, options),
        #[cfg(feature = "uffd")]
        ModelKind::VmemmapUffd => visitor.visit::<vmemmap::VmemmapUffd>(layout, options),
        #[cfg(feature = "uffd")]
        ModelKind::VmemmapUffdSigbus => {
            visitor.visit::<vmemmap::VmemmapUffdSigbus>(layout, options)
        }
    }
}

/// The memmap of model `kind` on `layout` with `struct page` size
/// `size`: every model builds at every size (the allocator's own
/// descriptors are not counted here; no allocator runs).
pub fn memmap_bytes_at(
    kind: ModelKind,
    size: sparsemem::PageSize,
    layout: &Layout,
    options: VmemmapOptions,
) -> Result<sparsemem::MemmapBytes, BuildError> {
    use sparsemem::{Page8, Page16, Page32, Page64, PageSize};
    match size {
        PageSize::B64 => memmap_of::<Page64>(kind, layout, options),
        PageSize::B32 => memmap_of::<Page32>(kind, layout, options),
        PageSize::B16 => memmap_of::<Page16>(kind, layout, options),
        PageSize::B8 => memmap_of::<Page8>(kind, layout, options),
    }
}

/// [`memmap_bytes_at`] for layout `P`, monomorphised per size.
fn memmap_of<P: sparsemem::PageLayout>(
    kind: ModelKind,
    layout: &Layout,
    options: VmemmapOptions,
) -> Result<sparsemem::MemmapBytes, BuildError> {
    use sparsemem::MemoryModel;
    use sparsemem::table::{Classic, Extreme};
    use vmemmap::{Probe, Table, Vmemmap};
    Ok(match kind {
        ModelKind::Flat => Flat::<P>::build(layout)?.memmap_bytes(),
        ModelKind::Sparse => sparsemem::Sparse::<Classic, P>::build(layout)?.memmap_bytes(),
        ModelKind::SparseExtreme => sparsemem::Sparse::<Extreme, P>::build(layout)?.memmap_bytes(),
        ModelKind::VmemmapTable => Vmemmap::<Table, P>::build(layout, options)?.memmap_bytes(),
        ModelKind::VmemmapProbe => Vmemmap::<Probe, P>::build(layout, options)?.memmap_bytes(),
        #[cfg(feature = "uffd")]
        ModelKind::VmemmapUffd => {
            Vmemmap::<vmemmap::UffdZeroPage, P>::build(layout, options)?.memmap_bytes()
        }
        #[cfg(feature = "uffd")]
        ModelKind::VmemmapUffdSigbus => {
            Vmemmap::<vmemmap::UffdSigbus, P>::build(layout, options)?.memmap_bytes()
        }
    })
}
