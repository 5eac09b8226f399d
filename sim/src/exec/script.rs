//! A scripted execution for unit tests: code bytes plus the outcome of every
//! decision the code cannot make by itself. Nothing runs; instructions are
//! decoded from the bytes and followed.
//!
//! Starting at the entry, each instruction is decoded. Straight-line code and
//! direct jumps and calls need no directive; near returns go back to the
//! matching call (a shadow stack). These consume the next [`Directive`]:
//! - a conditional branch: [`Directive::Taken`] or [`Directive::NotTaken`];
//! - an indirect jump or call, a far transfer (IRET, SYSRET...):
//!   [`Directive::Target`];
//! - a kernel entry: [`Directive::Syscall`] or [`Directive::ExitGroup`] (the
//!   kernel runs unseen), or [`Directive::Target`] (it goes to kernel code);
//! - a MOV to CR3: [`Directive::Cr3`], the value loaded.
//!
//! [`Directive::Event`]s at the front of the list are emitted before the next
//! instruction; [`Directive::Interrupt`] delivers a signal before the
//! instruction at its address, [`Directive::IntoKernel`] an interrupt or
//! exception handled by kernel code. The execution ends at
//! [`Directive::Stop`], after [`Directive::ExitGroup`], or when a decision is
//! needed and no directive is left.
//!
//! # Kernel code
//! With [`Script::kernel_from`], instructions at or above an address run at
//! CPL 0 ([`Retired::kernel`]) and the script shows the kernel
//! ([`ExecutionSource::shows_kernel`]): user code enters it by SYSCALL (or INT n)
//! with a [`Directive::Target`], or by [`Directive::IntoKernel`]; it comes back
//! by SYSRETQ or IRETQ with a [`Directive::Target`]. MOV CR3 there switches
//! processes. The return stack is shared, like the decoders'.
//!
//! ```
//! use pt_sim::exec::script::{Directive, Script};
//! use pt_sim::exec::{collect, ExecMode};
//! // 0x1000: dec ecx; jnz 0x1000; ret-less end
//! let mut s = Script::new(0x1000, ExecMode::Bit64)
//!     .code(0x1000, &[0xff, 0xc9, 0x75, 0xfc])
//!     .directives([Directive::Taken, Directive::NotTaken, Directive::Stop]);
//! assert_eq!(collect(&mut s).unwrap().len(), 4);
//! ```

use std::collections::VecDeque;

use super::insn::decode_at;
use super::memory::page_base;
use super::{
    BranchClass, CodeMemory, Event, ExecError, ExecItem, ExecMode, ExecutionSource, ExitKind,
    Retired, PAGE_SIZE,
};

/// The outcome of one decision, or something to insert into the execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Directive {
    /// The next conditional branch is taken.
    Taken,
    /// The next conditional branch falls through.
    NotTaken,
    /// The next indirect jump or call, far transfer or (into kernel code)
    /// kernel entry goes here.
    Target(u64),
    /// The next MOV to CR3 loads this value.
    Cr3(u64),
    /// The next kernel entry is this system call; it returns `ret` to `resume`
    /// (`None`: the fall-through).
    Syscall {
        /// System call number.
        nr: u64,
        /// Return value.
        ret: i64,
        /// Where user mode resumes (`None`: after the instruction).
        resume: Option<u64>,
    },
    /// The next kernel entry is `exit_group(code)`: the execution ends.
    ExitGroup(i32),
    /// Emitted before the next instruction.
    Event(Event),
    /// Before the instruction at `at` executes, a signal diverts control to
    /// `handler`.
    Interrupt {
        /// Address of the instruction that is interrupted (not executed yet).
        at: u64,
        /// Signal number.
        signo: i32,
        /// First instruction of the handler.
        handler: u64,
    },
    /// Before the instruction at `at` executes, an interrupt or exception
    /// enters the kernel at `handler` ([`Event::Interrupt`]).
    IntoKernel {
        /// Address of the instruction that is interrupted (not executed yet).
        at: u64,
        /// Vector.
        vector: u8,
        /// First instruction of the handler (kernel code).
        handler: u64,
    },
    /// The execution ends here.
    Stop,
}

/// A scripted execution (an [`ExecutionSource`]).
#[derive(Clone, Debug)]
pub struct Script {
    mem: CodeMemory,
    mode: ExecMode,
    kernel_from: Option<u64>,
    ip: u64,
    directives: Vec<Directive>,
    next: usize,
    shadow_stack: Vec<u64>,
    queued: VecDeque<ExecItem>,
    max_insns: u64,
    insns: u64,
    ended: bool,
}

/// System call number of `exit_group` on x86-64.
const NR_EXIT_GROUP: u64 = 231;

impl Script {
    /// An empty script starting at `entry` in `mode`.
    pub fn new(entry: u64, mode: ExecMode) -> Self {
        Self {
            mem: CodeMemory::new(),
            mode,
            kernel_from: None,
            ip: entry,
            directives: Vec::new(),
            next: 0,
            shadow_stack: Vec::new(),
            queued: VecDeque::new(),
            max_insns: 1_000_000,
            insns: 0,
            ended: false,
        }
    }

    /// Places code bytes at `addr`. Untouched bytes of the pages are INT3.
    pub fn code(mut self, addr: u64, bytes: &[u8]) -> Self {
        let mut i = 0usize;
        while i < bytes.len() {
            let a = addr.wrapping_add(i as u64);
            let base = page_base(a);
            let mut page = self
                .mem
                .page(base)
                .map(<[u8]>::to_vec)
                .unwrap_or_else(|| vec![0xcc; PAGE_SIZE as usize]);
            let off = (a - base) as usize;
            let n = (PAGE_SIZE as usize - off).min(bytes.len() - i);
            page[off..off + n].copy_from_slice(&bytes[i..i + n]);
            self.mem.set_page(base, &page);
            i += n;
        }
        self
    }

    /// Instructions at or above `addr` run at CPL 0 (kernel code).
    pub fn kernel_from(mut self, addr: u64) -> Self {
        self.kernel_from = Some(addr);
        self
    }

    fn is_kernel(&self, ip: u64) -> bool {
        self.kernel_from.is_some_and(|k| ip >= k)
    }

    /// Appends directives.
    pub fn directives(mut self, d: impl IntoIterator<Item = Directive>) -> Self {
        self.directives.extend(d);
        self
    }

    /// Ends the execution with an error after this many instructions (a
    /// guard against scripts that loop forever; default one million).
    pub fn max_instructions(mut self, n: u64) -> Self {
        self.max_insns = n;
        self
    }

    fn err(&self, what: &'static str) -> ExecError {
        ExecError::Script {
            index: self.next,
            ip: self.ip,
            what,
        }
    }

    /// Takes the next directive for a decision point; `None` ends the execution.
    fn take(&mut self) -> Option<Directive> {
        let d = self.directives.get(self.next).cloned();
        if d.is_some() {
            self.next += 1;
        }
        d
    }

    fn step(&mut self) -> Result<Option<ExecItem>, ExecError> {
        // Events and interrupts at the front come before the next instruction.
        match self.directives.get(self.next) {
            Some(Directive::Event(e)) => {
                let e = e.clone();
                self.next += 1;
                return Ok(Some(ExecItem::Event(e)));
            }
            Some(Directive::Interrupt { at, signo, handler }) if *at == self.ip => {
                let item = Event::Signal {
                    signo: *signo,
                    from_ip: self.ip,
                    handler: Some(*handler),
                };
                self.ip = *handler;
                self.next += 1;
                return Ok(Some(ExecItem::Event(item)));
            }
            Some(Directive::IntoKernel {
                at,
                vector,
                handler,
            }) if *at == self.ip => {
                if !self.is_kernel(*handler) {
                    return Err(self.err("an interrupt handler must be kernel code"));
                }
                let item = Event::Interrupt {
                    vector: *vector,
                    from_ip: self.ip,
                    from_kernel: self.is_kernel(self.ip),
                    handler: *handler,
                };
                self.ip = *handler;
                self.next += 1;
                return Ok(Some(ExecItem::Event(item)));
            }
            Some(Directive::Stop) => {
                self.ended = true;
                return Ok(None);
            }
            _ => {}
        }
        if self.insns >= self.max_insns {
            return Err(self.err("instruction limit reached"));
        }
        let ip = self.ip;
        let d = decode_at(&self.mem, ip, self.mode)?;
        let ft = ip.wrapping_add(u64::from(d.len));
        let is_decision = matches!(
            d.class,
            BranchClass::CondBranch
                | BranchClass::IndirectJump
                | BranchClass::IndirectCall
                | BranchClass::KernelEntry
                | BranchClass::FarBranch
        ) || d.mov_cr3;
        if is_decision {
            match self.directives.get(self.next) {
                None => {
                    self.ended = true;
                    return Ok(None);
                }
                Some(Directive::Interrupt { .. } | Directive::IntoKernel { .. }) => {
                    return Err(self.err("a decision came before the interrupt's address"))
                }
                _ => {}
            }
        }
        let mut exit = None;
        let kernel = self.is_kernel(ip);
        let next_ip = match d.class {
            BranchClass::Other if d.mov_cr3 => match self.take() {
                Some(Directive::Cr3(cr3)) => {
                    self.queued
                        .push_back(ExecItem::Event(Event::MovCr3 { cr3 }));
                    ft
                }
                _ => return Err(self.err("MOV CR3 needs Cr3")),
            },
            BranchClass::Other => ft,
            BranchClass::DirectJump => d.target.ok_or_else(|| self.err("jump without target"))?,
            BranchClass::DirectCall => {
                self.shadow_stack.push(ft);
                d.target.ok_or_else(|| self.err("call without target"))?
            }
            BranchClass::Return => self
                .shadow_stack
                .pop()
                .ok_or_else(|| self.err("return with an empty shadow stack"))?,
            BranchClass::CondBranch => match self.take() {
                Some(Directive::Taken) => {
                    d.target.ok_or_else(|| self.err("branch without target"))?
                }
                Some(Directive::NotTaken) => ft,
                _ => return Err(self.err("conditional branch needs Taken or NotTaken")),
            },
            BranchClass::IndirectJump | BranchClass::IndirectCall | BranchClass::FarBranch => {
                match self.take() {
                    Some(Directive::Target(t)) => {
                        if d.class == BranchClass::IndirectCall {
                            self.shadow_stack.push(ft);
                        }
                        t
                    }
                    _ => return Err(self.err("indirect branch needs Target")),
                }
            }
            BranchClass::KernelEntry => match self.take() {
                Some(Directive::Syscall { nr, ret, resume }) => {
                    self.queued
                        .push_back(ExecItem::Event(Event::SyscallEnter { nr, args: [0; 6] }));
                    self.queued
                        .push_back(ExecItem::Event(Event::SyscallExit { nr, ret }));
                    resume.unwrap_or(ft)
                }
                Some(Directive::ExitGroup(code)) => {
                    exit = Some(code);
                    ft
                }
                Some(Directive::Target(t)) if self.is_kernel(t) => t,
                _ => {
                    return Err(self.err("kernel entry needs Syscall, ExitGroup or a kernel Target"))
                }
            },
        };
        if let Some(code) = exit {
            self.queued.push_back(ExecItem::Event(Event::SyscallEnter {
                nr: NR_EXIT_GROUP,
                args: [code as u64, 0, 0, 0, 0, 0],
            }));
            self.queued
                .push_back(ExecItem::Event(Event::Exit(ExitKind::Exited(code))));
            self.ended = true;
        }
        self.ip = next_ip;
        self.insns += 1;
        Ok(Some(ExecItem::Insn(Retired {
            ip,
            next_ip,
            len: d.len,
            class: d.class,
            mode: self.mode,
            kernel,
        })))
    }
}

impl ExecutionSource for Script {
    fn next_item(&mut self) -> Result<Option<ExecItem>, ExecError> {
        if let Some(item) = self.queued.pop_front() {
            return Ok(Some(item));
        }
        if self.ended {
            return Ok(None);
        }
        self.step()
    }

    fn memory(&self) -> &CodeMemory {
        &self.mem
    }

    fn shows_kernel(&self) -> bool {
        self.kernel_from.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::log::{LogReader, LogWriter};
    use crate::exec::{check_continuity, collect};
    use iced_x86::code_asm::*;
    use iced_x86::BlockEncoderOptions;

    /// main: call f; dec ecx; jnz main; call [rax]; syscall; syscall
    /// f: ret
    /// g: ret (reached through call [rax])
    fn program() -> (u64, Vec<u8>, u64, u64) {
        let base = 0x40_1000;
        let mut a = CodeAssembler::new(64).unwrap();
        let mut main = a.create_label();
        let mut f = a.create_label();
        a.set_label(&mut main).unwrap();
        a.call(f).unwrap();
        a.dec(ecx).unwrap();
        a.jnz(main).unwrap();
        a.call(qword_ptr(rax)).unwrap();
        a.syscall().unwrap();
        a.syscall().unwrap();
        a.set_label(&mut f).unwrap();
        a.ret().unwrap();
        a.nop().unwrap();
        let r = a
            .assemble_options(base, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
            .unwrap();
        let code = r.inner.code_buffer.clone();
        let f_addr = r.label_ip(&f).unwrap();
        let g_addr = f_addr + 1 + 1; // after `ret; nop`
        let mut code = code;
        code.push(0xc3); // g: ret
        (base, code, f_addr, g_addr)
    }

    #[test]
    fn follows_directives() {
        let (base, code, f, g) = program();
        let mut s = Script::new(base, ExecMode::Bit64)
            .code(base, &code)
            .directives([
                Directive::Taken,
                Directive::NotTaken,
                Directive::Target(g),
                Directive::Syscall {
                    nr: 39,
                    ret: 7,
                    resume: None,
                },
                Directive::Event(Event::Mappings(vec![])),
                Directive::ExitGroup(3),
            ]);
        let items = collect(&mut s).unwrap();
        check_continuity(&items).unwrap();
        let insns: Vec<Retired> = items
            .iter()
            .filter_map(|i| match i {
                ExecItem::Insn(r) => Some(*r),
                _ => None,
            })
            .collect();
        // (call, ret, dec, jnz) x2, call [rax], ret, syscall, syscall
        assert_eq!(insns.len(), 12);
        assert_eq!(insns[0].next_ip, f);
        assert_eq!(insns[1].class, BranchClass::Return);
        assert_eq!(insns[1].next_ip, base + 5);
        assert!(insns[3].is_taken());
        assert!(!insns[7].is_taken());
        assert_eq!(insns[8].class, BranchClass::IndirectCall);
        assert_eq!(insns[8].next_ip, g);
        assert_eq!(insns[9].next_ip, insns[8].fall_through());
        let tail: Vec<&ExecItem> = items
            .iter()
            .skip_while(|i| **i != ExecItem::Insn(insns[10]))
            .collect();
        assert!(matches!(
            tail[1],
            ExecItem::Event(Event::SyscallEnter { nr: 39, .. })
        ));
        assert!(matches!(
            tail[2],
            ExecItem::Event(Event::SyscallExit { nr: 39, ret: 7 })
        ));
        assert!(matches!(tail[3], ExecItem::Event(Event::Mappings(_))));
        assert!(matches!(tail[4], ExecItem::Insn(_)));
        assert!(matches!(
            tail[6],
            ExecItem::Event(Event::Exit(ExitKind::Exited(3)))
        ));
        assert_eq!(tail.len(), 7);
    }

    #[test]
    fn interrupts_and_log_round_trip() {
        let (base, code, _, g) = program();
        let dec_at = base + 5;
        let script = Script::new(base, ExecMode::Bit64)
            .code(base, &code)
            .code(0x9000, &[0x90, 0x0f, 0x05])
            .directives([
                Directive::Interrupt {
                    at: dec_at,
                    signo: 10,
                    handler: 0x9000,
                },
                Directive::Syscall {
                    nr: 15,
                    ret: 0,
                    resume: Some(dec_at),
                },
                Directive::NotTaken,
                Directive::Target(g),
            ]);
        let items = collect(&mut script.clone()).unwrap();
        check_continuity(&items).unwrap();
        assert!(items.contains(&ExecItem::Event(Event::Signal {
            signo: 10,
            from_ip: dec_at,
            handler: Some(0x9000)
        })));
        // Ends at the first syscall of the main code: no directive left.
        assert!(matches!(
            items.last(),
            Some(ExecItem::Insn(Retired {
                class: BranchClass::Return,
                ..
            }))
        ));

        let mut w = LogWriter::new(Vec::new()).unwrap();
        crate::exec::log::write_source(&mut script.clone(), &mut w).unwrap();
        let bytes = w.finish().unwrap();
        let back = collect(&mut LogReader::new(bytes).unwrap()).unwrap();
        assert_eq!(back, items);
    }

    #[test]
    fn kernel_script_errors() {
        const K: u64 = 0xffff_ffff_8100_0000;
        let base = || {
            Script::new(0x1000, ExecMode::Bit64)
                .kernel_from(K)
                .code(0x1000, &[0x0f, 0x05, 0x90])
                .code(K, &[0x0f, 0x22, 0xd8, 0x48, 0x0f, 0x07])
        };
        let what = |s: Script| match collect(&mut s.clone()) {
            Err(ExecError::Script { what, .. }) => what,
            r => panic!("{r:?}"),
        };
        // A kernel entry to user code, a MOV CR3 without its value, an
        // interrupt handler in user code.
        assert!(what(base().directives([Directive::Target(0x1002)])).contains("kernel Target"));
        assert_eq!(
            what(base().directives([Directive::Target(K), Directive::Taken])),
            "MOV CR3 needs Cr3"
        );
        assert!(what(base().directives([Directive::IntoKernel {
            at: 0x1000,
            vector: 3,
            handler: 0x1002,
        }]))
        .contains("kernel code"));
        // Without kernel_from no address is kernel code.
        let user = Script::new(0x1000, ExecMode::Bit64)
            .code(0x1000, &[0x0f, 0x05])
            .directives([Directive::Target(K)]);
        assert!(!user.shows_kernel());
        assert!(matches!(
            collect(&mut user.clone()),
            Err(ExecError::Script { .. })
        ));
        // The happy path: CPL follows the address.
        let items = collect(&mut base().directives([
            Directive::Target(K),
            Directive::Cr3(0x5000),
            Directive::Target(0x1002),
        ]))
        .unwrap();
        let cpl: Vec<bool> = items
            .iter()
            .filter_map(|i| match i {
                ExecItem::Insn(r) => Some(r.kernel),
                _ => None,
            })
            .collect();
        assert_eq!(cpl, [false, true, true, false]);
        assert_eq!(items[2], ExecItem::Event(Event::MovCr3 { cr3: 0x5000 }));
    }

    #[test]
    fn script_errors() {
        let (base, code, _, _) = program();
        let mut s = Script::new(base, ExecMode::Bit64)
            .code(base, &code)
            .directives([Directive::Target(1)]);
        assert!(matches!(
            collect(&mut s),
            Err(ExecError::Script { index: 1, .. })
        ));
        let mut s = Script::new(base, ExecMode::Bit64).code(base, &[0xc3]);
        assert!(matches!(collect(&mut s), Err(ExecError::Script { .. })));
        let mut s = Script::new(base, ExecMode::Bit64)
            .code(base, &[0xeb, 0xfe])
            .max_instructions(10);
        assert!(matches!(
            collect(&mut s),
            Err(ExecError::Script {
                what: "instruction limit reached",
                ..
            })
        ));
        let mut s = Script::new(0x5000, ExecMode::Bit64);
        assert!(matches!(
            collect(&mut s),
            Err(ExecError::NoCode { ip: 0x5000 })
        ));
    }
}
