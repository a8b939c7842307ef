//! `pfn_valid` on arbitrary pfns (the whole u64 range) across every model,
//! against the reference, on generated layouts.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use sparsemem::reference::{Reference, Semantics};
use sparsemem::{Flat, MemoryModel, PageLayout, Pfn, SparseClassic, SparseExtreme};
use vmemmap::{VmemmapProbe, VmemmapTable};

#[derive(Arbitrary, Debug)]
struct Input {
    layout: common::FuzzLayout,
    pfns: Vec<u64>,
    near: Vec<(u8, i16)>,
}

fn check<M: MemoryModel>(model: &M, layout: &sparsemem::Layout, pfns: &[Pfn]) {
    let reference = Reference::new(layout, Semantics::of_model(model.name()));
    for &pfn in pfns {
        let valid = model.pfn_valid(pfn);
        assert_eq!(valid, reference.pfn_valid(pfn), "{} {pfn:?}", model.name());
        assert_eq!(
            model.pfn_to_online_page(pfn).is_some(),
            reference.pfn_online(pfn),
            "{} online {pfn:?}",
            model.name()
        );
        if valid {
            let page = model.pfn_to_page(pfn).expect("valid");
            assert!(page.is_present());
            assert_eq!(page.is_zone_device(), reference.is_device(pfn));
            assert_eq!(model.page_to_pfn(page), pfn);
        }
    }
}

fuzz_target!(|input: Input| {
    let Some(layout) = input.layout.build() else {
        return;
    };
    // Raw pfns, plus pfns near range edges (where bugs live).
    let mut pfns: Vec<Pfn> = input.pfns.iter().take(256).map(|&p| Pfn::new(p)).collect();
    let edges: Vec<u64> = layout
        .ranges()
        .iter()
        .flat_map(|r| {
            [
                layout.geometry().phys_to_pfn(r.start).get(),
                layout.geometry().phys_to_pfn(r.end).get(),
            ]
        })
        .collect();
    for &(i, d) in input.near.iter().take(256) {
        if let Some(&e) = edges.get(usize::from(i) % edges.len().max(1)) {
            pfns.push(Pfn::new(e.wrapping_add_signed(i64::from(d))));
        }
    }
    if let Some(m) = common::built(Flat::new(&layout), &layout, true) {
        check(&m, &layout, &pfns);
    }
    // The classic table refuses geometries whose table is too big.
    if let Ok(m) = SparseClassic::new(&layout) {
        check(&m, &layout, &pfns);
    }
    if let Some(m) = common::built(SparseExtreme::new(&layout), &layout, false) {
        check(&m, &layout, &pfns);
    }
    check(
        &VmemmapTable::new(&layout).expect("vmemmap builds"),
        &layout,
        &pfns,
    );
    check(
        &VmemmapProbe::new(&layout).expect("vmemmap builds"),
        &layout,
        &pfns,
    );
});
