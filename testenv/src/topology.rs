//! What one node of a Redis Cluster says about the cluster (`CLUSTER NODES`), read into values.

use crate::slot::SLOTS;

/// One node as another node (or itself) sees it: a line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) id: String,
    /// The client port; 0 for a node whose address is not known yet.
    pub(crate) port: u16,
    /// This line is the answering node itself.
    pub(crate) myself: bool,
    /// A master (with or without slots); else a replica.
    pub(crate) master: bool,
    /// The master's id, for a replica.
    pub(crate) master_id: Option<String>,
    /// Flagged `fail` (the cluster agreed it is down).
    pub(crate) failed: bool,
    /// Flagged `fail?`, `handshake` or `noaddr`: the answering node's view of it is not settled.
    pub(crate) unsettled: bool,
    /// Slot ranges it serves, inclusive.
    pub(crate) slots: Vec<(u16, u16)>,
}

/// The whole cluster as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    pub(crate) entries: Vec<Entry>,
}

impl View {
    /// Reads a `CLUSTER NODES` reply.
    pub(crate) fn parse(text: &str) -> Result<View, String> {
        let entries = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(parse_line)
            .collect::<Result<_, _>>()?;
        Ok(View { entries })
    }

    /// The answering node's own line.
    pub(crate) fn myself(&self) -> Option<&Entry> {
        self.entries.iter().find(|e| e.myself)
    }

    pub(crate) fn by_port(&self, port: u16) -> Option<&Entry> {
        self.entries.iter().find(|e| e.port == port && port != 0)
    }

    pub(crate) fn by_id(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// The node that serves `slot`.
    pub(crate) fn owner(&self, slot: u16) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi))
    }

    /// The slot map as maximal runs `(first, last, owner id)` in slot order, with `None` for
    /// runs no node serves; equal for two views exactly when they map every slot alike.
    pub(crate) fn slot_runs(&self) -> Vec<(u16, u16, Option<&str>)> {
        let mut owners: Vec<Option<&str>> = vec![None; usize::from(SLOTS)];
        for entry in &self.entries {
            for &(lo, hi) in &entry.slots {
                for slot in lo..=hi.min(SLOTS - 1) {
                    owners[usize::from(slot)] = Some(&entry.id);
                }
            }
        }
        let mut runs: Vec<(u16, u16, Option<&str>)> = Vec::new();
        for (slot, owner) in (0..SLOTS).zip(owners) {
            match runs.last_mut() {
                Some((_, last, run_owner)) if *run_owner == owner => *last = slot,
                _ => runs.push((slot, slot, owner)),
            }
        }
        runs
    }
}

fn parse_line(line: &str) -> Result<Entry, String> {
    let bad = |what: &str| format!("unreadable CLUSTER NODES line ({what}): {line:?}");
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return Err(bad("fewer than 8 fields"));
    }
    // `ip:port@cport`, maybe followed by `,hostname`; `:0@0` while the address is unknown.
    let address = fields[1].split(['@', ',']).next().unwrap_or_default();
    let port = address
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .ok_or_else(|| bad("address"))?;
    let flags: Vec<&str> = fields[2].split(',').collect();
    let has = |flag: &str| flags.contains(&flag);
    let mut slots = Vec::new();
    for token in &fields[8..] {
        // `[slot->-id]` and `[slot-<-id]` mark a migration in progress, not ownership.
        if token.starts_with('[') {
            continue;
        }
        let (lo, hi) = token.split_once('-').unwrap_or((token, token));
        let lo: u16 = lo.parse().map_err(|_| bad("slot"))?;
        let hi: u16 = hi.parse().map_err(|_| bad("slot"))?;
        if lo > hi || hi >= SLOTS {
            return Err(bad("slot range"));
        }
        slots.push((lo, hi));
    }
    Ok(Entry {
        id: fields[0].to_owned(),
        port,
        myself: has("myself"),
        master: has("master"),
        master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
        failed: has("fail"),
        unsettled: has("fail?") || has("handshake") || has("noaddr"),
        slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
55eb 127.0.0.1:17004@27004 slave e4b9 0 1796158944030 3 connected
8057 127.0.0.1:17002@27002 master - 0 1796158944031 2 connected 5461-10922
5c27 127.0.0.1:17005@27005,host.example master,fail - 1 1796158944132 1 disconnected
d28c 127.0.0.1:17006@27006 slave,fail? 8057 0 1796158944000 2 connected
e4b9 127.0.0.1:17003@27003 master - 0 1796158944132 3 connected 10923-16383 [10923->-8057]
e2fe 127.0.0.1:17001@27001 myself,master - 0 1796158944000 1 connected 0-5459 5460 [77-<-8057]
";

    #[test]
    fn reads_every_field_that_matters() {
        let view = View::parse(NODES).unwrap();
        assert_eq!(view.entries.len(), 6);
        let me = view.myself().unwrap();
        assert_eq!((me.id.as_str(), me.port, me.master), ("e2fe", 17001, true));
        assert_eq!(me.slots, vec![(0, 5459), (5460, 5460)]);

        let replica = view.by_port(17004).unwrap();
        assert!(!replica.master && !replica.myself);
        assert_eq!(replica.master_id.as_deref(), Some("e4b9"));
        assert!(!replica.failed && !replica.unsettled);

        let failed = view.by_id("5c27").unwrap();
        assert_eq!(failed.port, 17005);
        assert!(failed.failed && failed.master && failed.slots.is_empty());
        assert!(view.by_id("d28c").unwrap().unsettled);
        // Migration markers are not ownership.
        assert_eq!(view.by_id("e4b9").unwrap().slots, vec![(10923, 16383)]);
    }

    #[test]
    fn slot_runs_merge_ranges_and_name_holes() {
        let view = View::parse(NODES).unwrap();
        assert_eq!(
            view.slot_runs(),
            vec![
                (0, 5460, Some("e2fe")),
                (5461, 10922, Some("8057")),
                (10923, 16383, Some("e4b9"))
            ]
        );
        assert_eq!(view.owner(5460).unwrap().id, "e2fe");
        assert_eq!(view.owner(16383).unwrap().id, "e4b9");

        let holes = View::parse("a 127.0.0.1:1@2 myself,master - 0 0 1 connected 1-2\n").unwrap();
        assert_eq!(
            holes.slot_runs(),
            vec![(0, 0, None), (1, 2, Some("a")), (3, 16383, None)]
        );
        assert!(holes.owner(0).is_none());
    }

    #[test]
    fn an_unknown_address_has_port_zero_and_is_unsettled() {
        let view = View::parse("b :0@0 noaddr,master - 0 0 0 disconnected\n").unwrap();
        assert_eq!(view.entries[0].port, 0);
        assert!(view.entries[0].unsettled);
        assert!(view.by_port(0).is_none());
    }

    #[test]
    fn rejects_garbage() {
        assert!(View::parse("not a line\n").is_err());
        assert!(View::parse("a 127.0.0.1:x@2 master - 0 0 1 connected\n").is_err());
        assert!(View::parse("a 127.0.0.1:1@2 master - 0 0 1 connected 9-3\n").is_err());
        assert!(View::parse("a 127.0.0.1:1@2 master - 0 0 1 connected 16384\n").is_err());
        assert_eq!(View::parse("").unwrap().entries, vec![]);
    }
}
