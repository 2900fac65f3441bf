// Field types to grid cells and back: what each type draws, which editor it
// opens, and what value an edited cell sends to the API.

import { useEffect, useState } from "react";
import {
  GridCellKind,
  drawTextCell,
  type CustomCell,
  type CustomRenderer,
  type EditableGridCell,
  type GridCell,
  type ProvideEditorComponent,
} from "@glideapps/glide-data-grid";
import type { Api, Field, Row } from "./api";

export interface AppdorCellData {
  kind: "appdor";
  type: Field["type"];
  value: unknown;
  choices: string[];
  linkTable?: string;
}
export type AppdorCell = CustomCell<AppdorCellData>;

const pad = (n: number) => String(n).padStart(2, "0");

export function formatDatetime(v: unknown): string {
  if (typeof v !== "string" || !v) return "";
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) return v;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function toLocalInput(v: unknown): string {
  const s = formatDatetime(v);
  return s ? s.replace(" ", "T") : "";
}

export function display(f: Field, v: unknown): string {
  if (v === null || v === undefined) return "";
  switch (f.type) {
    case "number":
      return typeof v === "number" && f.options.precision !== undefined ? v.toFixed(f.options.precision) : String(v);
    case "checkbox":
      return v ? "true" : "false";
    case "datetime":
      return formatDatetime(v);
    case "multi_select":
      return Array.isArray(v) ? v.join(", ") : String(v);
    case "link":
      return Array.isArray(v) ? (v.length === 1 ? "1 linked row" : `${v.length} linked rows`) : "";
    default:
      return String(v);
  }
}

export function toCell(f: Field, v: unknown, readonly: boolean): GridCell {
  const text = display(f, v);
  switch (f.type) {
    case "text":
    case "long_text":
    case "email":
    case "url":
      return { kind: GridCellKind.Text, data: typeof v === "string" ? v : text, displayData: text, allowOverlay: true, readonly };
    case "number":
      return { kind: GridCellKind.Number, data: typeof v === "number" ? v : undefined, displayData: text, allowOverlay: true, readonly };
    case "checkbox":
      return { kind: GridCellKind.Boolean, data: v === true, allowOverlay: false, readonly };
    default: {
      const cell: AppdorCell = {
        kind: GridCellKind.Custom,
        data: { kind: "appdor", type: f.type, value: v ?? null, choices: f.options.choices ?? [], linkTable: f.options.table },
        copyData: text,
        allowOverlay: true,
        readonly,
      };
      return cell;
    }
  }
}

/** The API value of an edited cell. */
export function fromCell(f: Field, c: EditableGridCell | GridCell): unknown {
  switch (c.kind) {
    case GridCellKind.Text:
      return c.data === "" ? null : c.data;
    case GridCellKind.Number:
      return c.data === undefined || Number.isNaN(c.data) ? null : c.data;
    case GridCellKind.Boolean:
      return c.data === true;
    case GridCellKind.Custom: {
      const v = (c.data as AppdorCellData).value;
      return v === "" || (Array.isArray(v) && v.length === 0 && f.type !== "link") ? null : v;
    }
    default:
      return null;
  }
}

/** Parse pasted text for a custom cell. */
function parsePaste(d: AppdorCellData, s: string): AppdorCellData | undefined {
  s = s.trim();
  switch (d.type) {
    case "date":
      return { ...d, value: s || null };
    case "datetime": {
      if (!s) return { ...d, value: null };
      const t = new Date(s.includes("T") || s.endsWith("Z") ? s : s.replace(" ", "T"));
      return Number.isNaN(t.getTime()) ? { ...d, value: s } : { ...d, value: t.toISOString() };
    }
    case "single_select":
      return { ...d, value: s || null };
    case "multi_select":
      return { ...d, value: s ? s.split(",").map((x) => x.trim()).filter(Boolean) : [] };
    default:
      return undefined;
  }
}

export function renderer(api: Api): CustomRenderer<AppdorCell> {
  const LinkEditor = linkEditor(api);
  return {
    kind: GridCellKind.Custom,
    isMatch: (c): c is AppdorCell => (c.data as AppdorCellData | undefined)?.kind === "appdor",
    draw: (args, cell) => {
      drawTextCell(args, cell.copyData, cell.contentAlign);
      return true;
    },
    onPaste: (v, d) => parsePaste(d, v),
    provideEditor: (cell) => {
      const t = cell.data.type;
      if (t === "link") return { editor: LinkEditor };
      return { editor: PickerEditor };
    },
  };
}

const PickerEditor: ProvideEditorComponent<AppdorCell> = ({ value, onChange, onFinishedEditing }) => {
  const d = value.data;
  const set = (v: unknown) => onChange({ ...value, data: { ...d, value: v } });
  const done = (v: unknown) => onFinishedEditing({ ...value, data: { ...d, value: v } });
  const keys = (e: React.KeyboardEvent) => {
    if (e.key === "Enter") {
      e.preventDefault();
      onFinishedEditing(value, [0, 1]);
    } else if (e.key === "Escape") onFinishedEditing(undefined);
  };
  switch (d.type) {
    case "date":
      return <input className="cell-editor" type="date" autoFocus value={typeof d.value === "string" ? d.value : ""} onChange={(e) => set(e.target.value || null)} onKeyDown={keys} aria-label="Date" />;
    case "datetime":
      return (
        <input
          className="cell-editor"
          type="datetime-local"
          autoFocus
          value={toLocalInput(d.value)}
          onChange={(e) => set(e.target.value ? new Date(e.target.value).toISOString() : null)}
          onKeyDown={keys}
          aria-label="Date and time"
        />
      );
    case "single_select":
      return (
        <select className="cell-editor" autoFocus value={typeof d.value === "string" ? d.value : ""} onChange={(e) => done(e.target.value || null)} onKeyDown={keys} aria-label="Choice">
          <option value="">—</option>
          {d.choices.map((c) => (
            <option key={c}>{c}</option>
          ))}
        </select>
      );
    case "multi_select": {
      const cur = new Set(Array.isArray(d.value) ? (d.value as string[]) : []);
      return (
        <div className="cell-editor choices" onKeyDown={keys} role="group" aria-label="Choices">
          {d.choices.map((c, i) => (
            <label key={c}>
              <input
                type="checkbox"
                autoFocus={i === 0}
                checked={cur.has(c)}
                onChange={(e) => {
                  const next = new Set(cur);
                  if (e.target.checked) next.add(c);
                  else next.delete(c);
                  set(d.choices.filter((x) => next.has(x)));
                }}
              />
              {c}
            </label>
          ))}
          <button className="btn small primary" onClick={() => onFinishedEditing(value)}>
            Done
          </button>
        </div>
      );
    }
    default:
      return <input className="cell-editor" autoFocus defaultValue={String(d.value ?? "")} onChange={(e) => set(e.target.value)} onKeyDown={keys} />;
  }
};

/** Edits a link cell: search the linked table and tick rows. */
function linkEditor(api: Api): ProvideEditorComponent<AppdorCell> {
  return function LinkEditor({ value, onChange, onFinishedEditing }) {
    const d = value.data;
    const ids = Array.isArray(d.value) ? (d.value as string[]) : [];
    const [q, setQ] = useState("");
    const [found, setFound] = useState<Row[]>([]);
    const [label, setLabel] = useState<(r: Row) => string>(() => (r: Row) => r.id);
    const [error, setError] = useState("");
    useEffect(() => {
      if (!d.linkTable) return;
      const ctl = new AbortController();
      const t = setTimeout(() => {
        Promise.all([api.table(d.linkTable!, ctl.signal), api.rows(d.linkTable!, { q: q || undefined }, null, 20, ctl.signal)]).then(
          ([table, page]) => {
            const first = [...table.fields].sort((a, b) => a.position - b.position)[0];
            setLabel(() => (r: Row) => (first ? display(first, r.cells[first.id]) : "") || r.id.slice(0, 8));
            setFound(page.rows);
          },
          (e) => !ctl.signal.aborted && setError(String(e?.message ?? e)),
        );
      }, 150);
      return () => (clearTimeout(t), ctl.abort());
    }, [q, d.linkTable]);
    const toggle = (id: string) => onChange({ ...value, data: { ...d, value: ids.includes(id) ? ids.filter((x) => x !== id) : [...ids, id] } });
    return (
      <div className="cell-editor links" onKeyDown={(e) => e.key === "Escape" && onFinishedEditing(undefined)}>
        <input autoFocus placeholder="Search linked rows" aria-label="Search linked rows" value={q} onChange={(e) => setQ(e.target.value)} />
        {error && <p className="error">{error}</p>}
        <ul>
          {found.map((r) => (
            <li key={r.id}>
              <label>
                <input type="checkbox" checked={ids.includes(r.id)} onChange={() => toggle(r.id)} /> {label(r)}
              </label>
            </li>
          ))}
        </ul>
        <p className="muted small">{ids.length} linked</p>
        <button className="btn small primary" onClick={() => onFinishedEditing(value)}>
          Done
        </button>
      </div>
    );
  };
}
