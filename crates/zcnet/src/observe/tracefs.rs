//! Tracepoints as tracefs describes them: where tracefs is mounted, each event's id, and the offset
//! of each field of its record, read from `events/<group>/<event>/format` on the running kernel
//! (never from a table per kernel version).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Where tracefs is mounted: the first `tracefs` mount the calling thread sees, else the debugfs
/// automount point `/sys/kernel/debug/tracing`, when it has events.
pub(super) fn mount_point() -> Option<PathBuf> {
    super::mountinfo::mount_of("tracefs").or_else(|| {
        let debug = PathBuf::from("/sys/kernel/debug/tracing");
        debug.join("events").is_dir().then_some(debug)
    })
}

/// One tracepoint's id and record layout.
#[derive(Debug)]
pub(super) struct Event {
    /// `group:name`, for messages.
    pub name: String,
    /// Its id, the `config` of a `PERF_TYPE_TRACEPOINT` perf event.
    pub id: u64,
    fields: Vec<(String, i16, usize)>,
}

impl Event {
    /// Reads the tracepoint `group`/`name` under the tracefs at `root`.
    pub fn read(root: &Path, group: &str, name: &str) -> io::Result<Event> {
        let dir = root.join("events").join(group).join(name);
        let id = fs::read_to_string(dir.join("id"))?
            .trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "tracepoint id"))?;
        let format = fs::read_to_string(dir.join("format"))?;
        Ok(Event::parse(&format!("{group}:{name}"), id, &format))
    }

    /// The tracepoint `name` (`group:event`) with id `id`, described by the text of its `format`
    /// file.
    pub fn parse(name: &str, id: u64, format: &str) -> Event {
        Event {
            name: name.to_string(),
            id,
            fields: parse_fields(format),
        }
    }

    /// The offset and size of field `name` in the record, or an error naming the event and field.
    pub fn field(&self, name: &str) -> io::Result<(i16, usize)> {
        self.fields
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, off, size)| (off, size))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("tracepoint {} has no field {name}", self.name),
                )
            })
    }
}

/// The fields of a `format` file: lines `field:TYPE NAME;\toffset:N;\tsize:N;\tsigned:N;`, the name
/// being the last word of the declaration (without any array suffix).
fn parse_fields(format: &str) -> Vec<(String, i16, usize)> {
    format
        .lines()
        .filter_map(|line| {
            let mut parts = line.trim().split(';');
            let decl = parts.next()?.strip_prefix("field:")?;
            let name = decl.rsplit(' ').next()?.split('[').next()?.to_string();
            let mut number = |key: &str| -> Option<usize> {
                parts.next()?.trim().strip_prefix(key)?.parse().ok()
            };
            let offset = i16::try_from(number("offset:")?).ok()?;
            let size = number("size:")?;
            Some((name, offset, size))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_a_format_file() {
        let format = "name: sys_enter_sendto\nID: 2224\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
            \tfield:unsigned int flags;\toffset:40;\tsize:8;\tsigned:0;\n\
            \tfield:__data_loc char[] op_str;\toffset:52;\tsize:4;\tsigned:0;\n\
            \tfield:char comm[16];\toffset:56;\tsize:16;\tsigned:0;\n\n\
            print fmt: \"%d\", REC->flags\n";
        let event = Event::parse("syscalls:sys_enter_sendto", 2224, format);
        assert_eq!(event.field("flags").unwrap(), (40, 8));
        assert_eq!(event.field("common_type").unwrap(), (0, 2));
        assert_eq!(event.field("op_str").unwrap(), (52, 4));
        assert_eq!(event.field("comm").unwrap(), (56, 16));
        assert!(event.field("len").is_err());
    }
}
