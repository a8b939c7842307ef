//! HugeTLB vmemmap optimisation on a memfd-backed memmap: every pfn of an
//! optimised folio still answers, `compound_head` finds the head in both
//! encodings, the memmap's resident memory (read from the kernel: the
//! memfd's blocks and `/proc/self/smaps`' Pss) falls by the computed bytes
//! and comes back on restore, a write to an optimised tail kills a child
//! as a genuine fault, and bad requests are refused with one error each.

use std::os::unix::process::ExitStatusExt;

use sparsemem::hvo::{HugetlbVmemmap, HvoError, HvoLayout, hvo_freed_bytes};
use sparsemem::{
    Geometry, Layout, MemRange, MemoryModel, PAGE_STRUCT_SIZE, PageFlag, Pfn, RangeKind,
    SparseExtreme, TAIL_MAPPING, UserFlag,
};
use vmemmap::{
    Vmemmap, VmemmapOptions, VmemmapProbe, VmemmapTable, compound_head_fake_head,
    compound_head_mask,
};

const PMD_ORDER: u32 = 9;
const PUD_ORDER: u32 = 18;

/// 2 GiB of RAM in a 64 GiB physical space.
fn layout(g: Geometry) -> Layout {
    Layout::new(g, vec![MemRange::new(0, 2 << 30, RangeKind::Ram, 0)], "hvo").unwrap()
}

fn shared() -> VmemmapOptions {
    VmemmapOptions {
        thp: false,
        memfd: true,
    }
}

/// `prep_compound_page` by hand: this test is the folio's only user.
fn prep_compound<M: MemoryModel<Page = sparsemem::Page>>(model: &M, head: Pfn, order: u32) {
    let head_page = model.pfn_to_page(head).unwrap();
    // SAFETY: no allocator exists over the model; the test owns every
    // descriptor it writes.
    unsafe { head_page.set(PageFlag::Head) };
    for i in 1..1u64 << order {
        let tail = model.pfn_to_page(head + i).unwrap();
        tail.set_mapping(TAIL_MAPPING);
        // SAFETY: as above.
        unsafe { tail.set_compound_head(Some(head_page)) };
    }
}

fn file_bytes<D: vmemmap::Detector>(m: &Vmemmap<D>) -> u64 {
    m.memmap_file_bytes().unwrap().unwrap()
}

fn pss<D: vmemmap::Detector>(m: &Vmemmap<D>) -> u64 {
    m.memmap_smaps().unwrap().pss
}

/// Every pfn of the folio answers as before; `compound_head` of every
/// tail is the head.
fn check_folio<M: MemoryModel<Page = sparsemem::Page>>(
    model: &M,
    head: Pfn,
    order: u32,
    compound_head: impl Fn(&sparsemem::Page) -> *const sparsemem::Page,
) {
    let head_page = model.pfn_to_page(head).unwrap();
    for i in 0..1u64 << order {
        let pfn = head + i;
        assert!(model.pfn_valid(pfn), "{pfn:?}");
        let page = model.pfn_to_page(pfn).unwrap();
        assert_eq!(model.page_to_pfn(page), pfn);
        assert_eq!(
            compound_head(page),
            std::ptr::from_ref(head_page),
            "{pfn:?}"
        );
    }
}

fn fake_head(page: &sparsemem::Page) -> *const sparsemem::Page {
    compound_head_fake_head(page)
}

fn optimise_and_restore(order: u32, heads: &[u64], layout_kind: HvoLayout, batched: bool) {
    let model =
        VmemmapTable::with_options(&layout(Geometry::new(12, 27, 36).unwrap()), shared()).unwrap();
    let heads: Vec<Pfn> = heads.iter().map(|&h| Pfn::new(h)).collect();
    for &h in &heads {
        prep_compound(&model, h, order);
    }
    let (file0, pss0) = (file_bytes(&model), pss(&model));
    assert_eq!(file0, pss0, "every populated memmap page mapped once");
    // SAFETY: the test owns the folios and writes no tail until restore.
    unsafe { model.optimize(&heads, order, layout_kind, batched) }.unwrap();
    let freed = hvo_freed_bytes(order, 4096, PAGE_STRUCT_SIZE) * heads.len() as u64;
    // 2026's layout allocates its shared tail page once.
    let shared_page = if layout_kind == HvoLayout::SharedTail {
        4096
    } else {
        0
    };
    assert_eq!(file0 - file_bytes(&model), freed - shared_page);
    // The remapped tails are populated at once (as the kernel writes the
    // PTEs), so the page they alias is mapped by 8 VMAs per folio and
    // smaps, which prints each VMA's Pss in whole kB, rounds each share
    // (512 B) down: the Pss drop is the freed bytes plus up to one page
    // per folio. The file's blocks, above, are exact.
    let pss_drop = pss0 - pss(&model);
    let slack = 4096 * heads.len() as u64;
    assert!(
        (freed..=freed + slack).contains(&pss_drop),
        "{pss_drop} not within {freed} + {slack}"
    );
    for &h in &heads {
        assert_eq!(model.optimized(h), Some(layout_kind));
        match layout_kind {
            HvoLayout::FakeHead => check_folio(&model, h, order, fake_head),
            HvoLayout::SharedTail => check_folio(&model, h, order, compound_head_mask),
        }
    }
    assert_eq!(model.hvo_counts().pages_freed, freed / 4096);
    // SAFETY: as above; no tail reference is held across the call.
    unsafe { model.restore(&heads, order, batched) }.unwrap();
    assert_eq!(file_bytes(&model) - shared_page, file0);
    for &h in &heads {
        assert_eq!(model.optimized(h), None);
        // The pointer encoding is back, in every tail's own memory.
        check_folio(&model, h, order, |p| p.compound_head().unwrap_or(p));
        let last = model.pfn_to_page(h + ((1 << order) - 1)).unwrap();
        last.set_user(UserFlag::Dirty);
        assert!(last.test(PageFlag::Dirty), "restored tails are writable");
    }
    // Restored pages are in the file and in the page tables at once.
    assert_eq!(pss(&model), pss0, "every descriptor was read back");
}

#[test]
fn a_2m_folio_frees_7_of_8_vmemmap_pages_and_restore_brings_them_back() {
    optimise_and_restore(PMD_ORDER, &[0x1000], HvoLayout::FakeHead, false);
}

#[test]
fn a_1g_folio_frees_4095_of_4096_vmemmap_pages() {
    optimise_and_restore(PUD_ORDER, &[1 << PUD_ORDER], HvoLayout::FakeHead, false);
}

#[test]
fn batched_optimise_of_several_folios_frees_each() {
    optimise_and_restore(
        PMD_ORDER,
        &[0x200, 0x400, 0x800, 0x10000],
        HvoLayout::FakeHead,
        true,
    );
}

#[test]
fn shared_tail_layout_masks_without_fake_heads() {
    optimise_and_restore(PMD_ORDER, &[0x200, 0x600], HvoLayout::SharedTail, false);
    optimise_and_restore(PUD_ORDER, &[0], HvoLayout::SharedTail, true);
}

#[test]
fn fake_heads_exist_and_the_plain_read_is_fooled_by_them() {
    let model =
        VmemmapTable::with_options(&layout(Geometry::new(12, 27, 36).unwrap()), shared()).unwrap();
    let head = Pfn::new(0x1000);
    prep_compound(&model, head, PMD_ORDER);
    let per_page = 4096 / PAGE_STRUCT_SIZE;
    let tail = model.pfn_to_page(head + per_page).unwrap();
    assert!(!tail.test(PageFlag::Head), "plain folio: a tail");
    assert_eq!(
        fake_head(tail),
        std::ptr::from_ref(model.pfn_to_page(head).unwrap())
    );
    // SAFETY: the test owns the folio.
    unsafe { model.optimize(&[head], PMD_ORDER, HvoLayout::FakeHead, false) }.unwrap();
    assert!(tail.test(PageFlag::Head), "optimised: reads as the head");
    assert_eq!(tail.compound_head(), None, "the raw field misses the head");
    assert_eq!(
        fake_head(tail),
        std::ptr::from_ref(model.pfn_to_page(head).unwrap())
    );
}

#[test]
fn preconditions_refuse_with_one_error_each() {
    let l = layout(Geometry::new(12, 27, 36).unwrap());
    let anon = VmemmapTable::with_options(
        &l,
        VmemmapOptions {
            thp: false,
            memfd: false,
        },
    )
    .unwrap();
    assert!(matches!(
        anon.hvo_supported(PMD_ORDER),
        Err(HvoError::NotShared)
    ));
    let model = VmemmapTable::with_options(&l, shared()).unwrap();
    assert!(matches!(
        model.hvo_supported(3),
        Err(HvoError::NotOptimizable(3))
    ));
    // SAFETY: refused before anything is touched.
    let bad = unsafe { model.optimize(&[Pfn::new(0x100)], PMD_ORDER, HvoLayout::FakeHead, false) };
    assert!(
        matches!(bad, Err(HvoError::BadFolio(..))),
        "misaligned head"
    );
    // SAFETY: as above.
    let bad = unsafe { model.restore(&[Pfn::new(0x200)], PMD_ORDER, false) };
    assert!(matches!(bad, Err(HvoError::NotOptimized(_))));
    let arm = VmemmapTable::with_options(&layout(Geometry::ARM64_4K), shared()).unwrap();
    let err = arm.hvo_supported(PMD_ORDER).unwrap_err();
    assert!(matches!(err, HvoError::Arch(_)) && err.to_string().contains("arm64"));
    let sparse = SparseExtreme::new(&l).unwrap();
    let err = sparse.hugetlb_vmemmap().err().unwrap();
    assert!(err.to_string().contains("SPARSEMEM_VMEMMAP"), "{err}");
}

fn child(mode: &str) -> std::process::Output {
    sparsemem::testing::run_child("hvo::hvo_child", "PFNLAB_HVO_CHILD", mode).unwrap()
}

/// Run in a child: optimise a folio under the fault probe's handler, then
/// write to a tail in a remapped (read-only) vmemmap page.
#[test]
fn hvo_child() {
    let Ok(mode) = std::env::var("PFNLAB_HVO_CHILD") else {
        return;
    };
    let model =
        VmemmapProbe::with_options(&layout(Geometry::new(12, 27, 36).unwrap()), shared()).unwrap();
    let head = Pfn::new(0x1000);
    prep_compound(&model, head, PMD_ORDER);
    // SAFETY: the test owns the folio; the write below is the fault under
    // test, made in a child that is meant to die of it.
    unsafe { model.optimize(&[head], PMD_ORDER, HvoLayout::FakeHead, false) }.unwrap();
    assert!(
        model.pfn_valid(head + 100),
        "the probe still reads the tail"
    );
    let tail = model.pfn_to_page(head + 100).unwrap();
    if mode == "write" {
        eprintln!("writing");
        tail.set_user(UserFlag::Dirty);
    }
    eprintln!("survived");
}

#[test]
fn a_write_to_an_optimised_tail_kills_like_a_genuine_fault() {
    if std::env::var("PFNLAB_HVO_CHILD").is_ok() {
        return;
    }
    let out = child("write");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("writing"),
        "the child got to the write: {stderr}"
    );
    assert!(!stderr.contains("survived"), "{stderr}");
    assert!(
        out.status.signal() == Some(libc::SIGSEGV)
            || (out.status.code() == Some(1) && stderr.contains("AddressSanitizer: SEGV")),
        "{:?}",
        out.status
    );
    let read = child("read");
    assert!(
        read.status.success(),
        "reading an optimised tail is fine: {read:?}"
    );
}

#[test]
fn both_encodings_find_the_head_of_a_plain_folio() {
    let model =
        VmemmapTable::with_options(&layout(Geometry::new(12, 27, 36).unwrap()), shared()).unwrap();
    for (head, order) in [
        (Pfn::new(0x1000), PMD_ORDER),
        (Pfn::new(1 << PUD_ORDER), PUD_ORDER),
    ] {
        prep_compound(&model, head, order);
        check_folio(&model, head, order, fake_head);
        // SAFETY: the test owns the folio.
        unsafe { model.prep_compound_info(head, order) }.unwrap();
        check_folio(&model, head, order, compound_head_mask);
        let tail = model.pfn_to_page(head + 1).unwrap();
        let mask = tail.compound_head().unwrap().addr();
        assert_eq!(
            !mask + 1,
            (PAGE_STRUCT_SIZE << order) as usize,
            "the folio's memmap size"
        );
        // SAFETY: as above.
        unsafe { model.prep_compound_head(head, order) }.unwrap();
        check_folio(&model, head, order, |p| p.compound_head().unwrap_or(p));
    }
    // SAFETY: refused before anything is written.
    let bad = unsafe { model.prep_compound_info(Pfn::new(0x1001), PMD_ORDER) };
    assert!(matches!(bad, Err(HvoError::BadFolio(..))));
}
