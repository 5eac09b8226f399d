//! Properties of blocks over arbitrary bytes and section layouts: building never
//! panics, and every block agrees with decoding its instructions one by one.

use proptest::prelude::*;
use pt_decoder::block_cache::{BlockCache, BlockEnd};
use pt_decoder::image::Image;
use pt_decoder::insn::{decode_at, InsnClass};
use pt_decoder::ErrorCode;
use pt_encoder::packet::ExecMode;

fn mode() -> impl Strategy<Value = ExecMode> {
    prop_oneof![
        Just(ExecMode::Bit16),
        Just(ExecMode::Bit32),
        Just(ExecMode::Bit64)
    ]
}

/// Code-like bytes: mostly common opcodes, some random.
fn code(len: usize) -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => any::<u8>(),
        1 => prop::sample::select(vec![
            0x90, 0xc3, 0xe8, 0xe9, 0xeb, 0x74, 0x75, 0x0f, 0xff, 0x48, 0x66, 0xf3, 0xcc,
            0xe2, 0xe3, 0xcd,
        ]),
    ];
    prop::collection::vec(byte, 1..len)
}

/// Sections at 0x1000 plus offsets, some overlapping, some adjacent.
fn layout() -> impl Strategy<Value = Vec<(u64, Vec<u8>)>> {
    prop::collection::vec((0u64..0x80, code(0x60)), 1..5).prop_map(|v| {
        v.into_iter()
            .map(|(off, bytes)| (0x1000 + off, bytes))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn blocks_agree_with_single_instructions(sections in layout(), mode in mode()) {
        let mut image = Image::new();
        for (vaddr, bytes) in &sections {
            image.add_bytes(*vaddr, bytes.clone(), "s").unwrap();
        }
        let mut cache = BlockCache::new();
        // Start a block at every mapped address; follow both successors once.
        for ip in 0x1000..0x1100u64 {
            let id = match cache.lookup(&image, ip, mode) {
                Ok(id) => id,
                Err(err) => {
                    let first = decode_at(&image, ip, mode);
                    prop_assert!(first.is_err(), "{ip:#x}: block failed ({err}) but insn decodes");
                    prop_assert_eq!(first.unwrap_err(), err);
                    continue;
                }
            };
            let block = *cache.block(id);
            prop_assert_eq!(block.ip, ip);
            prop_assert_eq!(block.section, image.find(ip).unwrap().id());
            prop_assert!(block.ninsn >= 1);
            let mut at = ip;
            let insns: Vec<_> = cache.insns(id).collect();
            prop_assert_eq!(insns.len(), block.ninsn as usize);
            for (i, &(insn_ip, size)) in insns.iter().enumerate() {
                prop_assert_eq!(insn_ip, at);
                let insn = decode_at(&image, at, mode).unwrap();
                prop_assert_eq!(insn.size, size);
                let last = i + 1 == insns.len();
                prop_assert_eq!(insn.ends_block(), last && block.end == BlockEnd::Branch);
                if last {
                    prop_assert_eq!(insn, block.last);
                }
                // Each instruction lies in one section unless it is the truncated last.
                let section = image.find(at).unwrap();
                let inside = at + u64::from(size) - 1 <= section.last();
                prop_assert!(inside || (last && block.truncated));
                at += u64::from(size);
            }
            prop_assert_eq!(at, block.fall_through());
            prop_assert_eq!(block.byte_len(), at - ip);
            match block.end {
                BlockEnd::SectionEnd => {
                    let section = image.find(block.last.ip).unwrap();
                    prop_assert!(block.truncated || at == section.last() + 1);
                }
                BlockEnd::BadInsn => {
                    let next = cache.lookup(&image, at, mode).unwrap_err();
                    prop_assert_eq!(next.code, ErrorCode::BadInsn);
                }
                BlockEnd::Branch | BlockEnd::Limit => {}
            }
            let summary = cache.summary(id);
            prop_assert_eq!(summary.ninsn, block.ninsn);
            prop_assert_eq!(summary.is_direct(), block.last.is_direct());
            if let Ok(next) = cache.fall_through(&image, id) {
                prop_assert_eq!(cache.block(next).ip, at);
            }
            match cache.taken(&image, id) {
                Ok(next) => prop_assert_eq!(Some(cache.block(next).ip), block.last.target),
                Err(err) if block.last.target.is_none() => {
                    prop_assert_eq!(err.code, ErrorCode::BadQuery)
                }
                Err(err) => prop_assert!(
                    matches!(err.code, ErrorCode::NoMap | ErrorCode::BadInsn),
                    "{err}"
                ),
            }
            if block.last.target.is_some() {
                prop_assert!(matches!(
                    block.last.class,
                    InsnClass::Call | InsnClass::Jump | InsnClass::CondJump
                ));
            }
        }
    }
}
