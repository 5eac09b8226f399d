//! Block decoding and the resolution of a block's end.

use super::*;
use crate::exec::block::{always_faults, Exits};

fn insn(ip: u64, len: u8, class: BranchClass, target: u64) -> BlockInsn {
    BlockInsn {
        ip,
        len,
        class,
        target,
        rep: false,
        faults: false,
    }
}

#[test]
fn decodes_a_block_once() {
    // mov eax, 1; rep movsb; ud2; jz +0x10
    let code = [0xb8, 1, 0, 0, 0, 0xf3, 0xa4, 0x0f, 0x0b, 0x74, 0x10];
    let b = CodeBlock::decode(0x1000, &code).unwrap();
    let got: Vec<(u64, u8, BranchClass, bool, bool)> = b
        .insns
        .iter()
        .map(|i| (i.ip, i.len, i.class, i.rep, i.faults))
        .collect();
    assert_eq!(
        got,
        [
            (0x1000, 5, BranchClass::Other, false, false),
            (0x1005, 2, BranchClass::Other, true, false),
            (0x1007, 2, BranchClass::Other, false, true),
            (0x1009, 2, BranchClass::CondBranch, false, false),
        ]
    );
    assert_eq!(b.insns[3].target, 0x101b);
    assert_eq!(b.start(), 0x1000);
    assert!(CodeBlock::decode(0x1000, &[]).is_err());
    assert!(CodeBlock::decode(0x1000, &[0x06]).is_err()); // push es: invalid in 64-bit mode
}

#[test]
fn faulting_instructions() {
    assert!(always_faults(&[0xf4]));
    assert!(always_faults(&[0x66, 0x0f, 0x0b]));
    assert!(always_faults(&[0x0f, 0xb9, 0xc0]));
    assert!(!always_faults(&[0x0f, 0x05]));
    assert!(!always_faults(&[0x90]));
}

#[test]
fn branches_resolve_to_the_next_block() {
    let jcc = insn(0x1000, 2, BranchClass::CondBranch, 0x2000);
    let plain = |next_ip| Resolution {
        next_ip,
        retired: true,
        signal_from: None,
    };
    assert_eq!(resolve(&jcc, 0x1002, None), plain(0x1002));
    assert_eq!(resolve(&jcc, 0x2000, None), plain(0x2000));
    let ret = insn(0x1000, 1, BranchClass::Return, 0);
    assert_eq!(resolve(&ret, 0x5555, None), plain(0x5555));
    let call = insn(0x1000, 5, BranchClass::DirectCall, 0x3000);
    assert_eq!(resolve(&call, 0x3000, None), plain(0x3000));
    let other = insn(0x1000, 3, BranchClass::Other, 0);
    assert_eq!(resolve(&other, 0x1003, None), plain(0x1003));
}

#[test]
fn elsewhere_is_a_signal() {
    // A block cut by its size, then a handler: the block ran to its end.
    let other = insn(0x1000, 3, BranchClass::Other, 0);
    assert_eq!(
        resolve(&other, 0x9000, None),
        Resolution {
            next_ip: 0x1003,
            retired: true,
            signal_from: Some(0x1003)
        }
    );
    // UD2 never retires: the handler interrupts it.
    let mut ud2 = insn(0x1000, 2, BranchClass::Other, 0);
    ud2.faults = true;
    assert_eq!(
        resolve(&ud2, 0x9000, None),
        Resolution {
            next_ip: 0x1000,
            retired: false,
            signal_from: Some(0x1000)
        }
    );
    let jcc = insn(0x1000, 2, BranchClass::CondBranch, 0x2000);
    assert_eq!(resolve(&jcc, 0x9000, None).signal_from, Some(0x1002));
    let jmp = insn(0x1000, 2, BranchClass::DirectJump, 0x2000);
    assert_eq!(resolve(&jmp, 0x9000, None).signal_from, Some(0x2000));
}

#[test]
fn system_calls() {
    let sc = insn(0x1000, 2, BranchClass::KernelEntry, 0);
    // Back where it was called.
    assert_eq!(resolve(&sc, 0x1002, Some(1)).signal_from, None);
    // rt_sigreturn and execve go elsewhere by themselves.
    assert_eq!(
        resolve(&sc, 0x7000, Some(NR_RT_SIGRETURN)),
        Resolution {
            next_ip: 0x7000,
            retired: true,
            signal_from: None
        }
    );
    assert_eq!(resolve(&sc, 0x7000, Some(NR_EXECVE)).next_ip, 0x7000);
    // Any other call that comes back elsewhere met a signal on its way out.
    assert_eq!(
        resolve(&sc, 0x7000, Some(39)),
        Resolution {
            next_ip: 0x1002,
            retired: true,
            signal_from: Some(0x1002)
        }
    );
}

#[test]
fn programs_qemu_cannot_run() {
    let d = std::env::temp_dir().join(format!("pt-qemu-check-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join("elf32");
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 1;
    h[18] = 3;
    std::fs::write(&f, &h).unwrap();
    let e = check_program(&f).unwrap_err().to_string();
    assert!(e.contains("a 32-bit program"), "{e}");
    std::fs::write(&f, b"hello").unwrap();
    let e = check_program(&f).unwrap_err().to_string();
    assert!(e.contains("not an ELF program"), "{e}");
    std::fs::write(&f, b"#!/bin/sh\necho\n").unwrap();
    check_program(&f).unwrap();
    check_program(std::path::Path::new("/bin/sh")).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_transfer_to_a_handler_names_its_signal() {
    let mut p = Proc::default();
    p.set_handler(10, 0x4000);
    p.set_handler(11, 0x5000);
    p.set_handler(12, 0x5000);
    assert_eq!(p.signal_to(0x4000, None), 10);
    // One handler for two signals: the one the thread sent itself.
    assert_eq!(p.signal_to(0x5000, None), 0);
    assert_eq!(p.signal_to(0x5000, Some(12)), 12);
    assert_eq!(p.signal_to(0x5000, Some(10)), 0);
    // SIG_DFL for 12: 0x5000 handles 11 only.
    p.set_handler(12, 0);
    assert_eq!(p.signal_to(0x5000, None), 11);
    assert_eq!(p.signal_to(0x6000, None), 0);
    assert_eq!(sent_signal(NR_TGKILL, &[1, 2, 10, 0, 0, 0]), Some(10));
    assert_eq!(sent_signal(NR_KILL, &[1, 6, 0, 0, 0, 0]), Some(6));
}

#[test]
fn emulated_cpu_as_perf_names_it() {
    // QEMU 7.2's default x86-64 CPU: AuthenticAMD, CPUID.1:EAX 0x60fb1.
    let vendor = [
        u32::from_le_bytes(*b"Auth"),
        u32::from_le_bytes(*b"enti"),
        u32::from_le_bytes(*b"cAMD"),
    ];
    let mut brand = b"QEMU TCG CPU version 2.5+".to_vec();
    brand.resize(48, 0);
    let c = EmulatedCpu::from_cpuid(vendor, 0x60fb1, &brand);
    assert_eq!(c.cpuid, "AuthenticAMD,15,107,1");
    assert_eq!(c.brand, "QEMU TCG CPU version 2.5+");
    // An Intel part: extended model from family 6 on.
    let intel = [
        u32::from_le_bytes(*b"Genu"),
        u32::from_le_bytes(*b"ineI"),
        u32::from_le_bytes(*b"ntel"),
    ];
    assert_eq!(
        EmulatedCpu::from_cpuid(intel, 0xc06f2, &[]).cpuid,
        "GenuineIntel,6,207,2"
    );
}

/// The probe program runs under the installed QEMU and reads its CPU.
#[test]
fn emulated_cpu_of_the_installed_qemu() {
    pt_testkit::tool("qemu-x86_64", "qemu-user");
    let c = emulated_cpu(std::ffi::OsStr::new("qemu-x86_64")).unwrap();
    let parts: Vec<&str> = c.cpuid.split(',').collect();
    assert_eq!(parts.len(), 4, "{c:?}");
    assert!(
        ["AuthenticAMD", "GenuineIntel"].contains(&parts[0]),
        "{c:?}"
    );
    assert!(parts[1..].iter().all(|p| p.parse::<u32>().is_ok()), "{c:?}");
}

#[test]
fn a_blocks_exits_are_where_its_end_resolves_plainly() {
    // Every class, faulting or not, REP or not, against next blocks at the
    // fall-through, the target, the instruction itself (a REP iteration)
    // and elsewhere: the exits the plain loop tests are exactly the
    // resolutions with no signal, and those go to the next block's start.
    let classes = [
        BranchClass::Other,
        BranchClass::CondBranch,
        BranchClass::DirectJump,
        BranchClass::IndirectJump,
        BranchClass::DirectCall,
        BranchClass::IndirectCall,
        BranchClass::Return,
        BranchClass::FarBranch,
        BranchClass::KernelEntry,
    ];
    for class in classes {
        for (rep, faults) in [(false, false), (true, false), (false, true)] {
            let last = BlockInsn {
                rep,
                faults,
                ..insn(0x1000, 2, class, 0x2000)
            };
            let exits = last.exits();
            for next in [0x1000, 0x1002, 0x2000, 0x3000] {
                let r = resolve(&last, next, None);
                let plain = r.signal_from.is_none();
                assert_eq!(
                    exits.allows(next),
                    plain,
                    "{class:?} rep {rep} faults {faults} to {next:#x}"
                );
                if plain {
                    assert_eq!((r.next_ip, r.retired), (next, true));
                }
            }
        }
    }
    // The block's copy is its last instruction's.
    let b = CodeBlock::decode(0x1000, &[0x90, 0x74, 0x10]).unwrap();
    assert_eq!(b.exits(), Exits::To(0x1003, 0x1013));
    assert_eq!(b.exits(), b.last().exits());
}
