//! Resolving the command through `PATH`, and reading its ELF headers to tell
//! whether the interposer can see its I/O.
//!
//! What is checked, on the resolved file only (not on programs it runs
//! later, nor on a script's interpreter):
//!
//! - a file starting with `#!` is a script: no warning;
//! - an ELF file without a `PT_INTERP` program header is not started by the
//!   dynamic loader, which is what honours `LD_PRELOAD`: statically linked
//!   (including static-pie). Warned;
//! - an ELF file with a `.go.buildinfo` or `.note.go.buildid` section, or a
//!   `PT_NOTE` segment holding a note named `Go` of type 4 (the Go build ID,
//!   present even when section headers are stripped), is a Go program: Go
//!   makes its file system calls directly, not through libc, even when it is
//!   dynamically linked (cgo). Warned;
//! - anything else (other ELF files, unknown formats) is not warned about.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why the command cannot be run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    /// Exit status 127.
    #[error("{0}: command not found")]
    NotFound(String),
    /// Exit status 126.
    #[error("{}: {reason}", .path.display())]
    NotExecutable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
}

impl ResolveError {
    /// The exit status a shell would use.
    pub fn exit_code(&self) -> i32 {
        match self {
            ResolveError::NotFound(_) => crate::EXIT_NOT_FOUND,
            ResolveError::NotExecutable { .. } => crate::EXIT_CANNOT_EXECUTE,
        }
    }
}

/// The search path used when `PATH` is not set (glibc's `execvp` default).
pub const DEFAULT_PATH: &str = "/bin:/usr/bin";

fn executable(path: &Path) -> Result<(), &'static str> {
    match std::fs::metadata(path) {
        Err(_) => Err("No such file or directory"),
        Ok(m) if m.is_dir() => Err("Is a directory"),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Err("Permission denied"),
        Ok(_) => Ok(()),
    }
}

/// The file `cmd` runs, as a shell finds it: `cmd` itself if it contains a
/// `/`, else the first executable regular file named `cmd` in the
/// directories of `path_env` (`PATH`; empty entries mean the current
/// directory). A file found but not executable gives
/// [`ResolveError::NotExecutable`] if no executable one comes later.
pub fn resolve_command(cmd: &OsStr, path_env: Option<&OsStr>) -> Result<PathBuf, ResolveError> {
    let name = cmd.to_string_lossy().into_owned();
    if cmd.is_empty() {
        return Err(ResolveError::NotFound(name));
    }
    if cmd.as_bytes().contains(&b'/') {
        let path = PathBuf::from(cmd);
        return match executable(&path) {
            Ok(()) => Ok(path),
            Err("No such file or directory") => Err(ResolveError::NotFound(name)),
            Err(reason) => Err(ResolveError::NotExecutable { path, reason }),
        };
    }
    let search = path_env.map_or_else(|| OsString::from(DEFAULT_PATH), OsStr::to_os_string);
    let mut not_executable = None;
    for dir in search.as_bytes().split(|&b| b == b':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(dir))
        };
        let candidate = dir.join(cmd);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err("Permission denied") if not_executable.is_none() => {
                not_executable = Some(candidate);
            }
            Err(_) => {}
        }
    }
    match not_executable {
        Some(path) => Err(ResolveError::NotExecutable {
            path,
            reason: "Permission denied",
        }),
        None => Err(ResolveError::NotFound(name)),
    }
}

/// What the executable is, as far as the interposer is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linkage {
    /// An ELF file with a `PT_INTERP` header: started by the dynamic loader
    /// (named), which honours `LD_PRELOAD`.
    Dynamic(String),
    /// An ELF file without `PT_INTERP`: static (`pie` if it is a static-pie,
    /// i.e. has a `PT_DYNAMIC` header all the same).
    Static {
        /// A static-pie executable.
        pie: bool,
    },
    /// A script (`#!`), with its interpreter line.
    Script(String),
    /// Neither ELF nor a script.
    Unknown,
}

/// What [`inspect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExeInfo {
    /// How it is started.
    pub linkage: Linkage,
    /// A Go program (see the module documentation for how it is detected).
    pub go: bool,
    /// The shared libraries it names (`DT_NEEDED`), in order; empty for
    /// static executables, scripts and unknown files.
    pub needed: Vec<String>,
    /// The functions of [`WATCHED_IMPORTS`] it imports (undefined symbols
    /// of its `.dynsym`), in that order.
    pub imports: Vec<&'static str>,
}

/// Imported functions [`inspect`] reports: file I/O through mapped memory.
pub const WATCHED_IMPORTS: [&str; 3] = ["mmap", "mmap64", "msync"];

impl ExeInfo {
    /// The one-line warning to print for this executable, if any (without
    /// the `paio:` prefix).
    pub fn warning(&self, path: &Path) -> Option<String> {
        let p = path.display();
        match (&self.linkage, self.go) {
            (Linkage::Static { .. }, true) => Some(format!(
                "warning: {p} is a statically linked Go program: the interposer cannot see its I/O (no dynamic loader, and Go makes system calls directly), so it runs without a stage"
            )),
            (Linkage::Static { pie }, false) => Some(format!(
                "warning: {p} is statically linked{} (no PT_INTERP): LD_PRELOAD does not apply, the interposer cannot see its I/O, so it runs without a stage",
                if *pie { " (static-pie)" } else { "" }
            )),
            (_, true) => Some(format!(
                "warning: {p} is a Go program: Go makes its system calls directly, not through libc, so the interposer sees none of its file I/O"
            )),
            _ => None,
        }
    }
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;
const SHT_NOBITS: u32 = 8;
/// Largest header table or note segment read.
const MAX_READ: u64 = 1 << 20;

struct Elf {
    file: File,
    is64: bool,
    le: bool,
}

impl Elf {
    fn u16(&self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.le {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    }
    fn u32(&self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }
    /// A word: 8 bytes in ELF64, 4 in ELF32.
    fn word(&self, b: &[u8]) -> u64 {
        if self.is64 {
            let a: [u8; 8] = b[..8].try_into().unwrap();
            if self.le {
                u64::from_le_bytes(a)
            } else {
                u64::from_be_bytes(a)
            }
        } else {
            self.u32(b) as u64
        }
    }
    fn read_at(&mut self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        if len > MAX_READ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "ELF table too large",
            ));
        }
        self.file.seek(SeekFrom::Start(offset))?;
        let mut buf = vec![0; len as usize];
        self.file.read_exact(&mut buf)?;
        Ok(buf)
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed ELF: {what}"))
}

/// Whether a note segment holds a note named `Go` of type 4 (NT_GOBUILDID).
fn has_go_note(elf: &Elf, notes: &[u8]) -> bool {
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let namesz = elf.u32(&notes[at..]) as usize;
        let descsz = elf.u32(&notes[at + 4..]) as usize;
        let ty = elf.u32(&notes[at + 8..]);
        let name_start = at + 12;
        let Some(name) = notes.get(name_start..name_start.saturating_add(namesz)) else {
            return false;
        };
        if ty == 4 && name == b"Go\0" {
            return true;
        }
        let align4 = |n: usize| n.saturating_add(3) & !3;
        at = name_start
            .saturating_add(align4(namesz))
            .saturating_add(align4(descsz));
    }
    false
}

/// Reads the headers of `path` (see the module documentation).
pub fn inspect(path: &Path) -> io::Result<ExeInfo> {
    let mut file = File::open(path)?;
    let mut ident = [0u8; 64];
    let n = read_up_to(&mut file, &mut ident)?;
    let head = &ident[..n];
    if head.starts_with(b"#!") {
        let line = head[2..].split(|&b| b == b'\n').next().unwrap_or_default();
        return Ok(ExeInfo {
            linkage: Linkage::Script(String::from_utf8_lossy(line).trim().to_string()),
            go: false,
            needed: Vec::new(),
            imports: Vec::new(),
        });
    }
    if n < 52 || !head.starts_with(b"\x7fELF") {
        return Ok(ExeInfo {
            linkage: Linkage::Unknown,
            go: false,
            needed: Vec::new(),
            imports: Vec::new(),
        });
    }
    let is64 = match head[4] {
        1 => false,
        2 => true,
        _ => return Err(invalid("unknown class")),
    };
    let le = match head[5] {
        1 => true,
        2 => false,
        _ => return Err(invalid("unknown byte order")),
    };
    if is64 && n < 64 {
        return Err(invalid("truncated header"));
    }
    let mut elf = Elf { file, is64, le };
    // Offsets in the ELF header.
    let (phoff, shoff, rest) = if is64 {
        (elf.word(&head[32..]), elf.word(&head[40..]), 52)
    } else {
        (elf.word(&head[28..]), elf.word(&head[32..]), 40)
    };
    let phentsize = elf.u16(&head[rest + 2..]) as u64;
    let phnum = elf.u16(&head[rest + 4..]) as u64;
    let shentsize = elf.u16(&head[rest + 6..]) as u64;
    let shnum = elf.u16(&head[rest + 8..]) as u64;
    let shstrndx = elf.u16(&head[rest + 10..]) as u64;
    let min_ph = if is64 { 56 } else { 32 };
    if phnum > 0 && phentsize < min_ph {
        return Err(invalid("program header size"));
    }

    let mut interp = None;
    let mut dynamic = None;
    let mut loads = Vec::new();
    let mut go = false;
    let phdrs = elf.read_at(phoff, phentsize * phnum)?;
    for i in 0..phnum as usize {
        let ph = &phdrs[i * phentsize as usize..];
        let ty = elf.u32(ph);
        let (offset, filesz) = if is64 {
            (elf.word(&ph[8..]), elf.word(&ph[32..]))
        } else {
            (elf.word(&ph[4..]), elf.word(&ph[16..]))
        };
        match ty {
            PT_INTERP => {
                let bytes = elf.read_at(offset, filesz.min(4096))?;
                let s = bytes.split(|&b| b == 0).next().unwrap_or_default();
                interp = Some(String::from_utf8_lossy(s).into_owned());
            }
            PT_DYNAMIC => dynamic = Some((offset, filesz)),
            PT_LOAD => {
                let vaddr = if is64 {
                    elf.word(&ph[16..])
                } else {
                    elf.word(&ph[8..])
                };
                loads.push((vaddr, offset, filesz));
            }
            PT_NOTE if !go && filesz <= MAX_READ => {
                if let Ok(notes) = elf.read_at(offset, filesz) {
                    go = has_go_note(&elf, &notes);
                }
            }
            _ => {}
        }
    }
    let sections = Sections {
        off: shoff,
        entsize: shentsize,
        num: shnum,
    };
    if !go {
        go = has_go_section(&mut elf, &sections, shstrndx).unwrap_or(false);
    }
    let imports = imported(&mut elf, &sections).unwrap_or_default();
    let needed = match dynamic {
        Some((offset, size)) if interp.is_some() => {
            needed_libraries(&mut elf, offset, size, &loads).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let linkage = match interp {
        Some(i) => Linkage::Dynamic(i),
        None => Linkage::Static {
            pie: dynamic.is_some(),
        },
    };
    Ok(ExeInfo {
        linkage,
        go,
        needed,
        imports,
    })
}

/// Most `DT_NEEDED` entries read.
const MAX_NEEDED: usize = 256;

/// The `DT_NEEDED` names of the dynamic section at file `offset` (`size`
/// bytes), whose string table is found through the `PT_LOAD` segments
/// `loads` (`(vaddr, offset, filesz)`).
fn needed_libraries(
    elf: &mut Elf,
    offset: u64,
    size: u64,
    loads: &[(u64, u64, u64)],
) -> io::Result<Vec<String>> {
    const DT_NULL: u64 = 0;
    const DT_NEEDED: u64 = 1;
    const DT_STRTAB: u64 = 5;
    const DT_STRSZ: u64 = 10;
    let entry = if elf.is64 { 16 } else { 8 };
    let dynamic = elf.read_at(offset, size.min(MAX_READ))?;
    let (mut names, mut strtab, mut strsz) = (Vec::new(), None, None);
    for e in dynamic.chunks_exact(entry) {
        let (tag, val) = (elf.word(e), elf.word(&e[entry / 2..]));
        match tag {
            DT_NULL => break,
            DT_NEEDED if names.len() < MAX_NEEDED => names.push(val),
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = Some(val),
            _ => {}
        }
    }
    let (Some(vaddr), Some(len)) = (strtab, strsz) else {
        return Ok(Vec::new());
    };
    let Some(file_off) = loads
        .iter()
        .find(|&&(v, _, sz)| vaddr >= v && vaddr < v.saturating_add(sz))
        .map(|&(v, off, _)| off + (vaddr - v))
    else {
        return Ok(Vec::new());
    };
    let table = elf.read_at(file_off, len.min(MAX_READ))?;
    Ok(names
        .into_iter()
        .filter_map(|o| {
            let rest = table.get(o as usize..)?;
            let name = rest.split(|&b| b == 0).next()?;
            Some(String::from_utf8_lossy(name).into_owned())
        })
        .collect())
}

/// Where the section headers are.
struct Sections {
    off: u64,
    entsize: u64,
    num: u64,
}

/// A section header: (name offset, type, file offset, size, link).
type Shdr = (u32, u32, u64, u64, u32);

/// The section headers, if the file has usable ones.
fn section_headers(elf: &mut Elf, s: &Sections) -> io::Result<Option<Vec<Shdr>>> {
    let min_sh = if elf.is64 { 64 } else { 40 };
    if s.off == 0 || s.num == 0 || s.entsize < min_sh {
        return Ok(None);
    }
    let raw = elf.read_at(s.off, s.entsize * s.num)?;
    Ok(Some(
        (0..s.num)
            .map(|i| {
                let h = &raw[(i * s.entsize) as usize..];
                if elf.is64 {
                    (
                        elf.u32(h),
                        elf.u32(&h[4..]),
                        elf.word(&h[24..]),
                        elf.word(&h[32..]),
                        elf.u32(&h[40..]),
                    )
                } else {
                    (
                        elf.u32(h),
                        elf.u32(&h[4..]),
                        elf.word(&h[16..]),
                        elf.word(&h[20..]),
                        elf.u32(&h[24..]),
                    )
                }
            })
            .collect(),
    ))
}

/// The NUL-terminated string at `off` of `table`.
fn cstr(table: &[u8], off: u64) -> &[u8] {
    table
        .get(off as usize..)
        .and_then(|s| s.split(|&b| b == 0).next())
        .unwrap_or_default()
}

fn has_go_section(elf: &mut Elf, s: &Sections, shstrndx: u64) -> io::Result<bool> {
    let Some(shdrs) = section_headers(elf, s)? else {
        return Ok(false);
    };
    let Some(&(_, strtype, stroff, strsize, _)) = shdrs.get(shstrndx as usize) else {
        return Ok(false);
    };
    if strtype == SHT_NOBITS {
        return Ok(false);
    }
    let names = elf.read_at(stroff, strsize)?;
    Ok(shdrs.iter().any(|h| {
        let name = cstr(&names, h.0 as u64);
        name == b".go.buildinfo" || name == b".note.go.buildid"
    }))
}

/// The [`WATCHED_IMPORTS`] among the undefined symbols of `.dynsym`.
fn imported(elf: &mut Elf, s: &Sections) -> io::Result<Vec<&'static str>> {
    const SHT_DYNSYM: u32 = 11;
    let Some(shdrs) = section_headers(elf, s)? else {
        return Ok(Vec::new());
    };
    let Some(&(_, _, symoff, symsize, link)) = shdrs.iter().find(|h| h.1 == SHT_DYNSYM) else {
        return Ok(Vec::new());
    };
    let Some(&(_, _, stroff, strsize, _)) = shdrs.get(link as usize) else {
        return Ok(Vec::new());
    };
    let syms = elf.read_at(symoff, symsize)?;
    let names = elf.read_at(stroff, strsize)?;
    // st_name (4 bytes) and st_shndx: at 6 in Elf64_Sym (24 bytes), at 14
    // in Elf32_Sym (16 bytes); index 0 is SHN_UNDEF.
    let (size, shndx) = if elf.is64 { (24, 6) } else { (16, 14) };
    let mut found = [false; WATCHED_IMPORTS.len()];
    for sym in syms.chunks_exact(size) {
        if elf.u16(&sym[shndx..]) != 0 {
            continue;
        }
        let name = cstr(&names, elf.u32(sym) as u64);
        if let Some(i) = WATCHED_IMPORTS.iter().position(|w| w.as_bytes() == name) {
            found[i] = true;
        }
    }
    Ok(WATCHED_IMPORTS
        .iter()
        .zip(found)
        .filter_map(|(w, f)| f.then_some(*w))
        .collect())
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn cc(dir: &Path, name: &str, src: &str, flags: &[&str]) -> Option<PathBuf> {
        let c = dir.join(format!("{name}.c"));
        std::fs::write(&c, src).unwrap();
        let out = dir.join(name);
        let ok = Command::new("cc")
            .args(flags)
            .arg("-o")
            .arg(&out)
            .arg(&c)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then_some(out)
    }

    /// A static binary: with static libc if present, else without libc.
    fn static_binary(dir: &Path) -> PathBuf {
        cc(dir, "static", "int main(void) { return 0; }\n", &["-static"])
            .or_else(|| {
                cc(
                    dir,
                    "nolibc",
                    "void _start(void) { __asm__ volatile(\"mov $60, %eax\\n xor %edi, %edi\\n syscall\"); }\n",
                    &["-nostdlib", "-static"],
                )
            })
            .expect("cannot build a static binary with cc")
    }

    #[test]
    fn bin_ls_is_dynamic() {
        let info = inspect(Path::new("/bin/ls")).unwrap();
        assert!(
            matches!(info.linkage, Linkage::Dynamic(ref i) if i.contains("ld-linux")),
            "{info:?}"
        );
        assert!(!info.go);
        assert_eq!(info.warning(Path::new("/bin/ls")), None);
        assert!(info.needed.iter().any(|n| n == "libc.so.6"), "{info:?}");
    }

    #[test]
    fn needed_libraries_are_read_from_the_dynamic_section() {
        // Debian's fio links libaio (make setup installs fio).
        let info = inspect(Path::new("/usr/bin/fio")).unwrap();
        assert!(info.needed.iter().any(|n| n == "libaio.so.1"), "{info:?}");
        // fio's mmap engine: it imports mmap64 and msync; dd neither.
        assert_eq!(info.imports, ["mmap64", "msync"]);
        assert!(inspect(Path::new("/bin/dd")).unwrap().imports.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let bin = static_binary(dir.path());
        assert!(inspect(&bin).unwrap().needed.is_empty());
    }

    #[test]
    fn static_binaries_are_detected() {
        let dir = tempfile::tempdir().unwrap();
        let bin = static_binary(dir.path());
        let info = inspect(&bin).unwrap();
        assert!(matches!(info.linkage, Linkage::Static { .. }), "{info:?}");
        let w = info.warning(&bin).unwrap();
        assert!(
            w.starts_with("warning: ") && w.contains("statically linked"),
            "{w}"
        );
        assert!(!w.contains('\n'));
        // static-pie, if the toolchain supports it.
        if let Some(pie) = cc(
            dir.path(),
            "spie",
            "int main(void) { return 0; }\n",
            &["-static-pie"],
        ) {
            let info = inspect(&pie).unwrap();
            assert_eq!(info.linkage, Linkage::Static { pie: true });
        }
        // A dynamic one built by the same compiler, for contrast.
        let dynamic = cc(dir.path(), "dyn", "int main(void) { return 0; }\n", &[]).unwrap();
        assert!(matches!(
            inspect(&dynamic).unwrap().linkage,
            Linkage::Dynamic(_)
        ));
    }

    #[test]
    fn go_notes_and_sections_are_detected() {
        let dir = tempfile::tempdir().unwrap();
        // A dynamic ELF with a `.note.go.buildid` section holding a Go note,
        // as the Go linker writes it.
        let src = "__attribute__((section(\".note.go.buildid\"), used, aligned(4)))\n\
                   static const struct { unsigned n, d, t; char name[4]; char desc[8]; } note =\n\
                   { 3, 8, 4, \"Go\", \"abcdefg\" };\n\
                   int main(void) { return 0; }\n";
        let bin = cc(dir.path(), "gofake", src, &[]).unwrap();
        let info = inspect(&bin).unwrap();
        assert!(info.go, "{info:?}");
        assert!(matches!(info.linkage, Linkage::Dynamic(_)));
        let w = info.warning(&bin).unwrap();
        assert!(w.contains("is a Go program"), "{w}");
        // Section headers stripped: the note is still found through PT_NOTE.
        let stripped = dir.path().join("gofake-stripped");
        let mut bytes = std::fs::read(&bin).unwrap();
        bytes[40..48].copy_from_slice(&0u64.to_le_bytes()); // e_shoff
        bytes[60..62].copy_from_slice(&0u16.to_le_bytes()); // e_shnum
        std::fs::write(&stripped, bytes).unwrap();
        assert!(inspect(&stripped).unwrap().go);
    }

    #[test]
    fn a_real_go_binary() {
        // The Go toolchain's own `go` command is a Go program.
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
        dirs.push("/usr/local/go/bin".into());
        let go = dirs
            .iter()
            .map(|d| d.join("go"))
            .find(|p| p.is_file())
            .expect("this test needs a Go toolchain (`go` on PATH or /usr/local/go/bin)");
        let info = inspect(&go).unwrap();
        assert!(info.go, "{}: {info:?}", go.display());
        assert!(info.warning(&go).unwrap().contains("Go program"));
    }

    #[test]
    fn scripts_and_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        let info = inspect(&script).unwrap();
        assert_eq!(info.linkage, Linkage::Script("/bin/sh".into()));
        assert_eq!(info.warning(&script), None);
        let text = dir.path().join("t");
        std::fs::write(&text, "hello").unwrap();
        assert_eq!(inspect(&text).unwrap().linkage, Linkage::Unknown);
        // Program headers past the end of the file.
        let bad = dir.path().join("bad");
        let mut h = vec![0u8; 64];
        h[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\0");
        h[32..40].copy_from_slice(&0xffff_ffffu64.to_le_bytes()); // e_phoff
        h[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        h[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        std::fs::write(&bad, h).unwrap();
        assert!(inspect(&bad).is_err());
    }

    #[test]
    fn resolves_like_a_shell() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("tool"), "#!/bin/sh\n").unwrap(); // not executable
        std::fs::write(b.join("tool"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(b.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(
            resolve_command(OsStr::new("tool"), Some(&path)).unwrap(),
            b.join("tool")
        );
        let only_a = a.as_os_str();
        assert_eq!(
            resolve_command(OsStr::new("tool"), Some(only_a)).unwrap_err(),
            ResolveError::NotExecutable {
                path: a.join("tool"),
                reason: "Permission denied"
            }
        );
        let e = resolve_command(OsStr::new("no-such-tool-x"), Some(&path)).unwrap_err();
        assert_eq!(e.to_string(), "no-such-tool-x: command not found");
        assert_eq!(e.exit_code(), 127);
        assert_eq!(
            resolve_command(OsStr::new("/bin/ls"), None).unwrap(),
            PathBuf::from("/bin/ls")
        );
        let e = resolve_command(a.join("tool").as_os_str(), None).unwrap_err();
        assert_eq!(e.exit_code(), 126);
        let e = resolve_command(a.as_os_str(), None).unwrap_err();
        assert!(e.to_string().ends_with(": Is a directory"), "{e}");
        assert_eq!(
            resolve_command(OsStr::new("./nope"), None)
                .unwrap_err()
                .exit_code(),
            127
        );
        assert!(resolve_command(OsStr::new("sh"), Some(OsStr::new("/usr/bin:/bin"))).is_ok());
    }
}
