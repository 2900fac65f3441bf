/** An error said to the person, announced by screen readers; nothing without one. */
export function ErrorLine({ text }: { text: string }) {
  if (!text) return null;
  return (
    <p className="error" role="alert">
      {text}
    </p>
  );
}
