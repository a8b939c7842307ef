//! Every memory model at every `struct page` size, chosen once at the top
//! and monomorphised below it, as [`crate::models`] does for the 64-byte
//! models; and the two lookups `bench memdesc` and its criterion suite
//! time at every size.
//!
//! A size's model is handed out as a [`SizedModel`] trait object so that
//! the four sizes of one model can be interleaved trial by trial; the
//! object is called once per trial, and each of its methods runs a loop
//! that is monomorphised for the model and the layout, so no lookup
//! dispatches.

use buddy::BuddyModel;
use sparsemem::table::{Classic, Extreme};
use sparsemem::{
    BuddyPage, BuildError, Flat, Layout, MemmapBytes, MemoryModel, Page8, Page16, Page32, Page64,
    PageLayout, PageSize, Pfn, Sparse,
};
use vmemmap::{Probe, Table, Vmemmap, VmemmapOptions};

use super::build::BuildAt;
use crate::models::ModelKind;
use crate::workloads::XorShift;

/// A model type at any page size that the allocator runs over: what the
/// visitors below are generic over.
pub trait BuildableAt: BuildAt + BuddyModel {}

impl<M: BuildAt + BuddyModel> BuildableAt for M {}

/// Work to do with a model type at one size, compiled once per model and
/// size.
pub trait SizedVisitor {
    /// What the work returns.
    type Output;
    /// Does the work; builds the model itself.
    fn visit<M: BuildableAt>(self, layout: &Layout, options: VmemmapOptions) -> Self::Output;
}

/// Runs `visitor` with the model type of `kind` at `size`.
pub fn with_model_at<V: SizedVisitor>(
    kind: ModelKind,
    size: PageSize,
    layout: &Layout,
    options: VmemmapOptions,
    visitor: V,
) -> V::Output {
    match size {
        PageSize::B64 => at::<Page64, V>(kind, layout, options, visitor),
        PageSize::B32 => at::<Page32, V>(kind, layout, options, visitor),
        PageSize::B16 => at::<Page16, V>(kind, layout, options, visitor),
        PageSize::B8 => at::<Page8, V>(kind, layout, options, visitor),
    }
}

/// [`with_model_at`] for layout `P`.
fn at<P: BuddyPage, V: SizedVisitor>(
    kind: ModelKind,
    layout: &Layout,
    options: VmemmapOptions,
    visitor: V,
) -> V::Output {
    match kind {
        ModelKind::Flat => visitor.visit::<Flat<P>>(layout, options),
        ModelKind::Sparse => visitor.visit::<Sparse<Classic, P>>(layout, options),
        ModelKind::SparseExtreme => visitor.visit::<Sparse<Extreme, P>>(layout, options),
        ModelKind::VmemmapTable => visitor.visit::<Vmemmap<Table, P>>(layout, options),
        ModelKind::VmemmapProbe => visitor.visit::<Vmemmap<Probe, P>>(layout, options),
        #[cfg(feature = "uffd")]
        ModelKind::VmemmapUffd => {
            visitor.visit::<Vmemmap<vmemmap::UffdZeroPage, P>>(layout, options)
        }
        #[cfg(feature = "uffd")]
        ModelKind::VmemmapUffdSigbus => {
            visitor.visit::<Vmemmap<vmemmap::UffdSigbus, P>>(layout, options)
        }
    }
}

/// One model at one size, built: what a trial of each lookup calls.
pub trait SizedModel {
    /// The descriptor size.
    fn size(&self) -> PageSize;
    /// `pfn_valid` on every pfn of `pfns` ([`count_valid_at`]).
    fn count_valid(&self, pfns: &[Pfn]) -> u64;
    /// `n` dependent random lookups in `[first, first + span)`
    /// ([`chase_zone_ids`]).
    fn chase(&self, first: Pfn, span: u64, n: u64) -> u64;
    /// The memmap's bytes: the models' own counters, and for the vmemmap
    /// models the kernel's `Rss` of the reservation.
    fn memmap(&self) -> MemmapBytes;
}

/// A built model of type `M`.
struct Built<M>(M);

impl<M: MemoryModel> SizedModel for Built<M> {
    fn size(&self) -> PageSize {
        PageSize::try_from(<M::Page as PageLayout>::SIZE).expect("one of the four layouts")
    }

    fn count_valid(&self, pfns: &[Pfn]) -> u64 {
        count_valid_at(&self.0, pfns)
    }

    fn chase(&self, first: Pfn, span: u64, n: u64) -> u64 {
        chase_zone_ids(&self.0, first, span, n, CHASE_SEED)
    }

    fn memmap(&self) -> MemmapBytes {
        self.0.memmap_bytes()
    }
}

/// The seed of every chase, so each size walks the same pfns.
const CHASE_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// Builds `kind` at `size` on `layout` as a [`SizedModel`].
pub fn build_sized(
    kind: ModelKind,
    size: PageSize,
    layout: &Layout,
    options: VmemmapOptions,
) -> Result<Box<dyn SizedModel>, BuildError> {
    struct Build;
    impl SizedVisitor for Build {
        type Output = Result<Box<dyn SizedModel>, BuildError>;
        fn visit<M: BuildableAt>(self, layout: &Layout, options: VmemmapOptions) -> Self::Output {
            Ok(Box::new(Built(M::build_at(layout, options)?)))
        }
    }
    with_model_at(kind, size, layout, options, Build)
}

/// `pfn_valid` on every pfn, at any page size; returns how many were
/// valid.
#[inline(never)]
pub fn count_valid_at<M: MemoryModel>(model: &M, pfns: &[Pfn]) -> u64 {
    let mut valid = 0;
    for &pfn in pfns {
        valid += u64::from(model.pfn_valid(pfn));
    }
    valid
}

/// `n` random `pfn_to_page` (checked with `pfn_valid`, as the kernel's
/// callers do) plus a read of `page_zonenum` — `page->flags` at 32 and 16
/// bytes, the memdesc word at 8, the zone field beside the flags word at
/// 64 — over pfns `[first, first + span)`; `span` is a power of two.
///
/// Each pfn depends on the zone id read before it (folded into the next
/// random draw), so the loads form one chain and the loop measures a
/// lookup's latency, as a walker that acts on what it read does, not the
/// overlapped throughput of independent loads. The generator lives in
/// registers, so no pfn array competes with the memmap for the cache.
#[inline(never)]
pub fn chase_zone_ids<M: MemoryModel>(model: &M, first: Pfn, span: u64, n: u64, seed: u64) -> u64 {
    debug_assert!(span.is_power_of_two());
    let mask = span - 1;
    let mut rng = XorShift(seed | 1);
    let mut acc = 0u64;
    for _ in 0..n {
        let pfn = Pfn::new(first.get() + ((rng.next_u64() ^ acc) & mask));
        if let Some(page) = model.pfn_to_page(pfn) {
            acc = acc.wrapping_add(u64::from(page.zone_id()) + 1);
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Layout {
        use sparsemem::{Geometry, MemRange, RangeKind};
        Layout::new(
            Geometry::X86_64,
            vec![MemRange::new(0, 1 << 30, RangeKind::Ram, 0)],
            "test",
        )
        .unwrap()
    }

    #[test]
    fn every_model_builds_at_every_size_and_reports_it() {
        let layout = small();
        for &kind in ModelKind::ALL {
            for size in PageSize::ALL {
                let m = build_sized(kind, size, &layout, VmemmapOptions::default()).unwrap();
                assert_eq!(m.size(), size, "{kind} at {size}");
                let pfns = [Pfn::new(0), Pfn::new(1000), Pfn::new(1 << 40)];
                assert_eq!(m.count_valid(&pfns), 2, "{kind} at {size}");
                assert!(
                    m.memmap().reserved >= (1 << 18) * size.bytes(),
                    "{kind} at {size}"
                );
            }
        }
    }

    #[test]
    fn the_chase_walks_the_same_pfns_at_every_size() {
        let layout = small();
        let acc: Vec<u64> = PageSize::ALL
            .iter()
            .map(|&size| {
                let m =
                    build_sized(ModelKind::Flat, size, &layout, VmemmapOptions::default()).unwrap();
                m.chase(Pfn::new(0), 1 << 16, 1000)
            })
            .collect();
        // Every pfn of the span is valid, and every reserved page is in
        // the same zone, so each step adds the same amount at every size.
        assert!(acc.iter().all(|&a| a == acc[0] && a >= 1000), "{acc:?}");
    }
}
