import { createRoot } from "react-dom/client";
import "@glideapps/glide-data-grid/dist/index.css";
import "./styles.css";
import { AppRoot } from "./App";

createRoot(document.getElementById("root")!).render(<AppRoot />);
