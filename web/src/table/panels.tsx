// The table view's panels and menus: a field's header menu, the filter, field and
// fields panels.
import { useEffect, useRef, useState } from "react";
import type { Api, Field, FieldType, TableSummary } from "../api";

const typeLabels: Record<FieldType, string> = {
  text: "Text",
  long_text: "Long text",
  number: "Number",
  checkbox: "Checkbox",
  date: "Date",
  datetime: "Date and time",
  single_select: "Single select",
  multi_select: "Multi select",
  email: "Email",
  url: "URL",
  link: "Link to another table",
};

const ops = ["eq", "neq", "lt", "lte", "gt", "gte", "contains", "empty", "not_empty"] as const;

export function HeaderMenu(p: { field: Field; x: number; y: number; onClose: () => void; onSort: (desc: boolean) => void; onRename: (n: string) => void; onDelete: () => void }) {
  const [name, setName] = useState(p.field.name);
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const away = (e: MouseEvent) => ref.current && !ref.current.contains(e.target as Node) && p.onClose();
    const esc = (e: KeyboardEvent) => e.key === "Escape" && p.onClose();
    setTimeout(() => addEventListener("mousedown", away));
    addEventListener("keydown", esc);
    return () => (removeEventListener("mousedown", away), removeEventListener("keydown", esc));
  }, [p]);
  return (
    <div ref={ref} className="menu card" style={{ left: Math.min(p.x, innerWidth - 260), top: p.y }} role="menu">
      <div className="menu-title">
        {p.field.name} <span className="muted">{typeLabels[p.field.type]}</span>
      </div>
      <button role="menuitem" onClick={() => p.onSort(false)}>
        Sort ascending
      </button>
      <button role="menuitem" onClick={() => p.onSort(true)}>
        Sort descending
      </button>
      <form
        className="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          if (name.trim() && name.trim() !== p.field.name) p.onRename(name.trim());
        }}
      >
        <input value={name} aria-label="Field name" onChange={(e) => setName(e.target.value)} />
        <button className="btn small" type="submit">
          Rename
        </button>
      </form>
      <button role="menuitem" className="danger-text" onClick={p.onDelete}>
        Delete field
      </button>
    </div>
  );
}

export function FilterPanel({ fields, onAdd, onClose }: { fields: Field[]; onAdd: (f: string) => void; onClose: () => void }) {
  const [field, setField] = useState(fields[0]?.id ?? "");
  const [op, setOp] = useState<string>("contains");
  const [value, setValue] = useState("");
  const needsValue = op !== "empty" && op !== "not_empty";
  return (
    <form
      className="panel card"
      onSubmit={(e) => {
        e.preventDefault();
        if (field) onAdd(`${field}:${op}:${needsValue ? value : ""}`);
      }}
    >
      <select value={field} onChange={(e) => setField(e.target.value)} aria-label="Filter field">
        {fields.map((f) => (
          <option key={f.id} value={f.id}>
            {f.name}
          </option>
        ))}
      </select>
      <select value={op} onChange={(e) => setOp(e.target.value)} aria-label="Filter operator">
        {ops.map((o) => (
          <option key={o} value={o}>
            {o.replace("_", " ")}
          </option>
        ))}
      </select>
      {needsValue && <input value={value} onChange={(e) => setValue(e.target.value)} aria-label="Filter value" placeholder="Value" />}
      <button className="btn primary small" type="submit">
        Add filter
      </button>
      <button className="btn ghost small" type="button" onClick={onClose}>
        Cancel
      </button>
    </form>
  );
}

export function FieldPanel({ api, appId, onCreate, onClose }: { api: Api; appId: string; onCreate: (f: Omit<Field, "id" | "position">) => void; onClose: () => void }) {
  const [name, setName] = useState("");
  const [type, setType] = useState<FieldType>("text");
  const [choices, setChoices] = useState("");
  const [precision, setPrecision] = useState("");
  const [linkTable, setLinkTable] = useState("");
  const [tables, setTables] = useState<TableSummary[]>([]);
  useEffect(() => {
    if (type === "link")
      api.tables(appId).then(
        (t) => (setTables(t.tables), setLinkTable((x) => x || t.tables[0]?.id || "")),
        () => setTables([]),
      );
  }, [api, appId, type]);
  return (
    <form
      className="panel card"
      onSubmit={(e) => {
        e.preventDefault();
        const options: Field["options"] = {};
        if (type === "single_select" || type === "multi_select") options.choices = choices.split(",").map((c) => c.trim()).filter(Boolean);
        if (type === "number" && precision !== "") options.precision = Number(precision);
        if (type === "link") options.table = linkTable;
        if (name.trim()) onCreate({ name: name.trim(), type, options });
      }}
    >
      <input autoFocus value={name} onChange={(e) => setName(e.target.value)} placeholder="Field name" aria-label="Field name" />
      <select value={type} onChange={(e) => setType(e.target.value as FieldType)} aria-label="Field type">
        {Object.entries(typeLabels).map(([t, l]) => (
          <option key={t} value={t}>
            {l}
          </option>
        ))}
      </select>
      {(type === "single_select" || type === "multi_select") && (
        <input value={choices} onChange={(e) => setChoices(e.target.value)} placeholder="Choices, comma separated" aria-label="Choices" />
      )}
      {type === "number" && <input value={precision} onChange={(e) => setPrecision(e.target.value)} placeholder="Decimals" aria-label="Decimals" type="number" min={0} max={10} />}
      {type === "link" && (
        <select value={linkTable} onChange={(e) => setLinkTable(e.target.value)} aria-label="Linked table">
          {tables.map((t) => (
            <option key={t.id} value={t.id}>
              {t.name}
            </option>
          ))}
        </select>
      )}
      <button className="btn primary small" type="submit">
        Create field
      </button>
      <button className="btn ghost small" type="button" onClick={onClose}>
        Cancel
      </button>
    </form>
  );
}

/** Fields by keyboard as well as by the column menu: rename, move, delete. */
export function FieldsPanel(p: {
  fields: Field[];
  onRename: (f: Field, name: string) => void;
  onMove: (from: number, to: number) => void;
  onDelete: (f: Field) => void;
  onClose: () => void;
}) {
  return (
    <div className="panel card fields-panel">
      <ul>
        {p.fields.map((f, i) => (
          <li key={f.id}>
            <FieldRow field={f} onRename={(n) => p.onRename(f, n)} />
            <span className="muted small">{typeLabels[f.type]}</span>
            <button className="btn small ghost" disabled={i === 0} onClick={() => p.onMove(i, i - 1)} aria-label={`Move ${f.name} left`}>
              ←
            </button>
            <button className="btn small ghost" disabled={i === p.fields.length - 1} onClick={() => p.onMove(i, i + 1)} aria-label={`Move ${f.name} right`}>
              →
            </button>
            <button className="btn small ghost danger" onClick={() => p.onDelete(f)} aria-label={`Delete ${f.name}`}>
              Delete
            </button>
          </li>
        ))}
      </ul>
      <button className="btn ghost small" type="button" onClick={p.onClose}>
        Close
      </button>
    </div>
  );
}

function FieldRow({ field, onRename }: { field: Field; onRename: (n: string) => void }) {
  const [name, setName] = useState(field.name);
  useEffect(() => setName(field.name), [field.name]);
  return (
    <form
      className="inline-form"
      onSubmit={(e) => {
        e.preventDefault();
        if (name.trim() && name.trim() !== field.name) onRename(name.trim());
      }}
    >
      <input value={name} onChange={(e) => setName(e.target.value)} aria-label={`Name of ${field.name}`} />
      <button className="btn small" type="submit" disabled={!name.trim() || name.trim() === field.name}>
        Rename
      </button>
    </form>
  );
}
