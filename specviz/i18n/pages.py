"""Strings of the Compare, Losslessness and Why-it-is-free pages."""

STRINGS: dict[str, tuple[str, str]] = {
    # ---- compare page
    "cmp.title": ("Compare EAGLE-1/2/3 and Medusa: acceptance apart from speed", "比较 EAGLE-1/2/3 与 Medusa：接受情况与速度分开看"),
    "cmp.intro": (
        "Two questions, kept apart. **Acceptance**: how many tokens does a round keep, at the same tree size? That depends on the drafter, not on the machine, and was measured when the heads were calibrated. **Speed**: what does a round cost on this machine? The what-if combines the two for this machine and, once measured, a GPU.",
        "两个问题分开来看。**接受**：在相同大小的树下，每轮能保留多少 token？这取决于草稿器而不是机器，已在校准草稿头时测得。**速度**：在这台机器上每轮要花多少时间？硬件假设推演把两者结合起来，用于本机，以及（测得之后的）GPU。",
    ),
    "cmp.methods": ("Methods", "方法"),
    "cmp.run": ("Run comparison", "运行比较"),
    "cmp.first_trees": ("First-round trees", "第一轮的树"),
    "cmp.table": ("Measured results", "测量结果"),
    "cmp.hist": ("Tokens per round", "每轮 token 数"),
    "cmp.depth": ("Acceptance rate by depth", "各深度接受率"),
    "cmp.shipped": ("Shipped benchmark results", "附带的基准测试结果"),
    "cmp.no_shipped": ("No benchmark results are shipped yet (assets/results/ is empty).", "尚无附带的基准测试结果（assets/results/ 为空）。"),
    "cmp.live": ("Live comparison", "实时比较"),
    "cmp.slower": (
        "Slower than vanilla here: {methods}. Each draft tree is verified in one pass, and on this device the extra tree tokens cost more than the accepted guesses save (see *Why it is free*). The trees are set in the sidebar's Draft settings; *Tune the tree for this machine* picks the size that is fastest here.",
        "在本机上比普通解码慢：{methods}。每棵草稿树在一次前向中验证，而在本设备上额外的树 token 的代价超过了被接受的猜测所节省的时间（见“为什么几乎免费”）。草稿树在侧边栏的草稿设置中设定；“为本机调优草稿树”会选出在本机最快的大小。",
    ),
    "cmp.slower_tuned": (
        "Slower than vanilla here: {methods}, each already at the tree tuned for this machine. Each draft tree is verified in one pass, and on this device an extra tree token costs a sizeable part of a pass, more than these heads' accepted guesses save on this prompt (see *Why it is free*; on a GPU, or with dense or bf16 weights here, the same heads are faster than vanilla).",
        "在本机上比普通解码慢：{methods}（均已使用为本机调优的草稿树）。每棵草稿树在一次前向中验证，而在本设备上每多一个树 token 就要花掉一次前向的相当一部分，超过了这些草稿头在此提示上被接受的猜测所节省的时间（见“为什么几乎免费”；在 GPU 上，或在本机使用稠密或 bf16 权重时，同样的草稿头比普通解码快）。",
    ),
    "cmp.none": ("Select at least one available method.", "请至少选择一个可用方法。"),
    "cmp.col_method": ("method", "方法"),
    "cmp.col_tokens": ("new tokens", "新 token 数"),
    "cmp.col_seconds": ("seconds", "秒"),
    "cmp.col_identical": ("identical to vanilla", "与普通解码一致"),
    "cmpx.tab_acc": ("Acceptance at equal trees", "相同大小树下的接受情况"),
    "cmpx.tab_speed": ("Speed on this machine", "本机速度"),
    "cmpx.tab_whatif": ("Hardware what-if", "硬件假设推演"),
    "cmpx.tab_diff": ("EAGLE-1 vs 2 vs 3", "EAGLE-1、2、3 的区别"),
    "cmpx.acc_intro": (
        "How many tokens a round keeps depends on the drafter and the target, not on the machine. So the fair comparison gives every method a tree of the **same size**: here the size of EAGLE-1's paper tree, {n} nodes (25 drafts + the root). These numbers were measured when the heads were calibrated, so nothing has to run now.",
        "每轮能保留多少 token 取决于草稿器和目标模型，而与机器无关。因此公平的比较是让每种方法使用**相同大小**的树：这里取 EAGLE-1 论文中树的大小，共 {n} 个节点（25 个草稿 + 根）。这些数字是在校准草稿头时测得的，现在无需运行任何计算。",
    ),
    "cmpx.acc_source": (
        "Measured: greedy fp32 decoding of the {prompts} built-in prompts (specviz.examples), {tokens} new tokens each, on {date}, recording every candidate the drafter scored, then walking each output round by round as a decode with that tree would (specviz.tuning acceptance profiles). Dynamic trees at depth {d}; static trees keep their most useful nodes first.",
        "测量方式：对 {prompts} 个内置提示词（specviz.examples）做贪心 fp32 解码，每个生成 {tokens} 个新 token，测于 {date}，记录草稿器打分的每个候选，再像用该树解码那样逐轮走过每个输出（specviz.tuning 接受率档案）。动态树深度为 {d}；静态树优先保留最有用的节点。",
    ),
    "cmpx.no_profiles": ("No acceptance profiles ship with these heads: run `python -m specviz.tuning profile`.", "这些草稿头没有附带接受率档案：请运行 `python -m specviz.tuning profile`。"),
    "cmpx.tau_at": ("{method}: tau at {n} nodes", "{method}：{n} 个节点时的 tau"),
    "cmpx.medusa_size": ("Medusa's whole tree has {n} nodes (it has fewer heads than the tree is deep): it is shown at its full size.", "Medusa 的整棵树只有 {n} 个节点（它的头数少于树的深度）：这里按其完整大小显示。"),
    "cmpx.size_axis": ("tree size N (nodes, root included)", "树大小 N（节点数，含根）"),
    "cmpx.tau_axis": ("tau (tokens per round)", "tau（每轮 token 数）"),
    "cmpx.size_mark": ("compared size: {n}", "比较的大小：{n}"),
    "cmpx.rec_title": ("Every method run by the engine at {n} nodes", "引擎以 {n} 个节点运行每种方法"),
    "cmpx.rec_source": (
        "Recorded with `python scripts/record_acceptance.py`: the same {prompts} prompts, {tokens} new tokens each, greedy fp32, {rounds} rounds in all, on {date}. Each round keeps its accepted length and how deep its tree reached.",
        "用 `python scripts/record_acceptance.py` 录制：同样的 {prompts} 个提示词，每个生成 {tokens} 个新 token，贪心 fp32，共 {rounds} 轮，录制于 {date}。每轮记录其接受长度和树达到的深度。",
    ),
    "cmpx.rec_tau_note": (
        "tau of the recorded runs (new tokens / target passes). It differs from the profile's tau above: this run decodes another set of prompts, with another number of new tokens each. With heads this close, methods can trade places between the two.",
        "录制运行的 tau（新 token 数 / 目标前向次数）。它与上面档案中的 tau 不同：这次运行解码的是另一组提示词，每个生成的新 token 数也不同。草稿头之间差距这么小时，两者中各方法的先后顺序可能不同。",
    ),
    "cmpx.no_recording": ("The equal-tree recording (assets/acceptance/equal_trees.json) is not in this build: run `python scripts/record_acceptance.py`.", "此版本没有相同大小树的录制（assets/acceptance/equal_trees.json）：请运行 `python scripts/record_acceptance.py`。"),
    "cmpx.speed_intro": (
        "Speed is a property of the machine. Runs every selected method live on the prompt below with the sidebar's sampling settings and seed, and times it here.",
        "速度取决于机器。下面用侧边栏的采样设置和种子，在下方提示词上实时运行所选的每种方法，并在本机计时。",
    ),
    "cmpx.trees": ("Trees", "草稿树"),
    "cmpx.trees.tuned": ("each method's tree tuned for this machine (the first run measures the costs and times the best trees greedy and at temperature 1, under a minute a method, once; at T > 0 the tree timed at temperature 1 is used, and EAGLE-2/3 draw their drafts from q)",
                         "每种方法使用为本机调优的草稿树（首次运行会测量本机耗时，并分别在贪心和温度 1 下实测最佳的几棵树，每种方法不到一分钟，仅一次；T > 0 时使用在温度 1 下实测的树，且 EAGLE-2/3 从 q 中抽取草稿）"),
    "cmpx.col_runs": ("tokens/s of each run", "各次运行的词元/秒"),
    "cmpx.timing_turns": ("Timing every method {n} times, in turns with vanilla...", "正在轮流为每种方法计时（各 {n} 次，与普通解码交替）……"),
    "cmpx.median_note": ("Each row is the median of {n} runs taken in turns (vanilla, then each method, {n} times over), so a drift in the machine's speed hits every method alike.", "每行是轮流运行 {n} 次（普通解码与各方法交替）的中位数，机器速度的波动对每种方法影响相同。"),
    "cmpx.tuning_once": ("{m}: tuning its tree for this machine (once, ~20 s)...", "{m}：正在为本机调优草稿树（仅一次，约 20 秒）……"),
    "cmpx.trees.equal": ("equal: {n} nodes for every method (EAGLE-1's paper size)", "相同：每种方法都用 {n} 个节点（EAGLE-1 论文的大小）"),
    "cmpx.trees.sidebar": ("the sidebar's draft settings (tune them for this machine there)", "侧边栏的草稿设置（可在那里为本机调优）"),
    "cmpx.na_sampling": ("n/a (sampling)", "不适用（采样）"),
    "cmpx.whatif_intro": (
        "Predicted speedup = tau(N) × t(1) / (t(N) + t_draft): the acceptance measured above (tau at tree size N) combined with a machine's measured cost of one target pass over N tokens, t(N), and of drafting, t_draft (both include the engine's fixed cost per round). A tree pays where the curve is above 1.",
        "预测加速比 = tau(N) × t(1) / (t(N) + t_draft)：把上面测得的接受长度（树大小为 N 时的 tau）与某台机器实测的成本结合起来——目标模型对 N 个 token 做一次前向的耗时 t(N)，以及起草耗时 t_draft（两者都包含引擎每轮的固定开销）。曲线高于 1 的地方，草稿树才划算。",
    ),
    "cmpx.no_costs": (
        "This machine's costs are not measured yet. Measuring them takes about a minute, once: they are cached and the sidebar's tree tuner uses the same numbers.",
        "本机的成本尚未测量。测量只需进行一次，约一分钟：结果会被缓存，侧边栏的草稿树调优也使用同样的数字。",
    ),
    "cmpx.some_costs": (
        "Drafting is not measured yet on this machine for: {methods}. Their curves are left out; the others are drawn from measured costs. Measuring takes about a minute, once.",
        "本机尚未测量以下方法的起草成本：{methods}。它们的曲线暂不绘制；其余曲线都基于实测成本。测量只需进行一次，约一分钟。",
    ),
    "cmpx.measure_costs": ("Measure this machine's costs", "测量本机成本"),
    "cmpx.no_gpu_curve": (
        "No cost curve measured on a GPU ships with this version yet, so only this machine's curve is drawn; none is made up. A GPU curve appears here beside it once measured: run `python -m specviz.tuning show` on a GPU and copy the cost file it writes into assets/curves/.",
        "此版本尚未附带在 GPU 上测得的成本曲线，因此这里只画出本机的曲线，不会编造任何数字。一旦测得，GPU 曲线就会显示在旁边：在 GPU 上运行 `python -m specviz.tuning show`，并把它写出的成本文件复制到 assets/curves/。",
    ),
    "cmpx.measure_batch": ("Measure batch {b} on this machine", "在本机测量批大小 {b}"),
    "cmpx.batch_needed": (
        "At batch {b} every pass carries {b} sequences: the cost of N tree tokens per sequence has to be measured at that batch (a few seconds).",
        "批大小为 {b} 时，每次前向同时处理 {b} 个序列：需要在该批大小下测量每个序列 N 个树 token 的成本（几秒钟）。",
    ),
    "cmpx.batch_note": (
        "Target passes measured at batch {b}; drafting costs are the batch-1 ones (a drafter's step is small next to the target's).",
        "目标前向按批大小 {b} 测量；起草成本沿用批大小 1 的测量值（草稿器的一步相比目标模型很小）。",
    ),
    "cmpx.this_machine": ("this machine", "本机"),
    "cmpx.col_machine": ("machine", "机器"),
    "cmpx.col_best_n": ("best N", "最佳 N"),
    "cmpx.col_speedup": ("predicted speedup at best N", "最佳 N 处的预测加速比"),
    "cmpx.col_speedup_at": ("predicted speedup at N = {n}", "N = {n} 时的预测加速比"),
    "cmpx.vanilla_line": ("vanilla (1x)", "普通解码（1 倍）"),
    "cmpx.whatif_note": (
        "This machine ({device}, measured {date}): one target pass costs {t1:.1f} ms for 1 token and {t16:.1f} ms for 16 ({r:.1f}x), so on this CPU in fp32 extra tree tokens are far from free and the best trees are small. On a GPU a pass of 16-60 tokens costs about as much as one, which is where the papers' large trees pay. Dynamic trees use the drafting cost at depth {d}.",
        "本机（{device}，测于 {date}）：目标模型前向 1 个 token 耗时 {t1:.1f} 毫秒，16 个 token 耗时 {t16:.1f} 毫秒（{r:.1f} 倍），因此在这台 CPU 上以 fp32 运行时，额外的树 token 远非免费，最佳的树都很小。在 GPU 上，一次处理 16 到 60 个 token 的代价与处理一个差不多，这正是论文中大树划算的原因。动态树使用深度 {d} 的起草成本。",
    ),
    "cmpx.diff_table": (
        "| | what the draft head sees | the draft tree | training |\n|---|---|---|---|\n"
        "| **EAGLE-1** | the target's last hidden state (feature) plus the next token's embedding; one decoder layer predicts the next feature, the target's own LM head turns it into tokens | **static**: the same 25-node tree every round | feature regression (SmoothL1) + 0.1 × cross-entropy |\n"
        "| **EAGLE-2** | **the same head as EAGLE-1** | **dynamic**: expands the branches the head is most confident about (cumulative draft probability) and keeps the best N−1 candidates, so the tree's shape follows the context | nothing new: it reuses EAGLE-1's head |\n"
        "| **EAGLE-3** | **fused low, middle and high features** (inputs of target layers 2, 15 and 27 here) instead of the last one; its own LM head over a **reduced draft vocabulary** | dynamic, as EAGLE-2 | **training-time test**: the head is unrolled on its own outputs during training, token loss only, so later draft steps are trained as they are used |",
        "| | 草稿头看到什么 | 草稿树 | 训练 |\n|---|---|---|---|\n"
        "| **EAGLE-1** | 目标模型最后一层的隐藏状态（特征）加上下一个 token 的嵌入；一个解码器层预测下一个特征，再由目标模型自己的 LM 头转成 token | **静态**：每轮都用同一棵 25 节点的树 | 特征回归（SmoothL1）+ 0.1 × 交叉熵 |\n"
        "| **EAGLE-2** | **与 EAGLE-1 相同的草稿头** | **动态**：沿草稿头最有把握的分支（累积草稿概率）扩展，保留最好的 N−1 个候选，树的形状随上下文变化 | 没有新训练：沿用 EAGLE-1 的草稿头 |\n"
        "| **EAGLE-3** | **融合低、中、高三层特征**（此处为目标模型第 2、15、27 层的输入），而不只是最后一层；使用自己的 LM 头和**缩减的草稿词表** | 动态，与 EAGLE-2 相同 | **训练时测试**：训练时让草稿头在自己的输出上展开多步，只用 token 损失，使后面的起草步骤按实际使用方式受训 |",
    ),
    "cmpx.paper_title": ("The papers' numbers (speedup · tau)", "论文中的数字（加速比 · tau）"),
    "cmpx.paper_table": (
        "| source | EAGLE-1 | EAGLE-2 | EAGLE-3 | Medusa |\n|---|---|---|---|---|\n"
        "| EAGLE-3 paper, Table 1: LLaMA-3.1-8B-Instruct, T = 0, mean of MT-bench, HumanEval, GSM8K, Alpaca, CNN/DM | – | 3.23x · 4.11 | 4.44x · 6.23 | – |\n"
        "| same, T = 1 | – | 2.80x · 3.62 | 3.45x · 4.92 | – |\n"
        "| Spec-Bench leaderboard: Vicuna-7B, A100, greedy | 2.10x · 3.58 | 2.36x · 4.34 | – | 1.71x · 2.31 |\n\n"
        "Serving (EAGLE-3 paper, Table 3): 1.81x at batch 2, 1.38x at batch 64.",
        "| 来源 | EAGLE-1 | EAGLE-2 | EAGLE-3 | Medusa |\n|---|---|---|---|---|\n"
        "| EAGLE-3 论文表 1：LLaMA-3.1-8B-Instruct，T = 0，MT-bench、HumanEval、GSM8K、Alpaca、CNN/DM 的平均 | – | 3.23x · 4.11 | 4.44x · 6.23 | – |\n"
        "| 同上，T = 1 | – | 2.80x · 3.62 | 3.45x · 4.92 | – |\n"
        "| Spec-Bench 排行榜：Vicuna-7B，A100，贪心 | 2.10x · 3.58 | 2.36x · 4.34 | – | 1.71x · 2.31 |\n\n"
        "服务场景（EAGLE-3 论文表 3）：批大小 2 时 1.81 倍，批大小 64 时 1.38 倍。",
    ),
    "cmpx.ours_title": ("Ours: SmolLM2-135M-Instruct with the shipped heads", "我们的结果：SmolLM2-135M-Instruct 与附带的草稿头"),
    "cmpx.col_tau_equal": ("tau at {n} nodes (acceptance profile)", "{n} 个节点时的 tau（接受率档案）"),
    "cmpx.col_tau_recorded": ("tau at {n} nodes (engine run)", "{n} 个节点时的 tau（引擎运行）"),
    "cmpx.col_tau_bench": ("tau in the benchmark", "基准测试中的 tau"),
    "cmpx.col_tree_bench": ("benchmark tree (nodes a round, mean; tuned for its CPU)", "基准测试的树（每轮平均节点数，按该 CPU 调优）"),
    "cmpx.col_speedup_bench": ("speedup vs vanilla on this CPU", "本 CPU 上相对普通解码的加速比"),
    "cmpx.ours_note": (
        "Benchmark: assets/results/{file} ({n} Spec-Bench questions, {tokens} new tokens, fp32 on a 2-core {cpu}, {date}, trees tuned for it; the newest shipped run); tau at equal trees: the recording in the Acceptance tab.",
        "基准测试：assets/results/{file}（{n} 个 Spec-Bench 问题，每个 {tokens} 个新 token，在双核 {cpu} 上以 fp32 运行，{date}，树按该 CPU 调优；最新的随附结果）；相同大小树下的 tau：见“相同大小树下的接受情况”标签页中的录制。",
    ),
    "cmpx.gap_title": ("Why our numbers are far below the papers'", "为什么我们的数字远低于论文"),
    "cmpx.gap": (
        "- **A 135M-parameter target.** The papers draft for 7-70B models. Here one draft step (a decoder layer plus a 49k-word LM head) costs a sizeable fraction of a whole target pass, so drafting is relatively expensive, and a small model's next token is harder to guess from its features.\n"
        "- **Heads trained on a CPU, briefly.** EAGLE-3 was trained in 13 runs (the first from scratch, then fine-tuning), about 15.5 hours of a 2-core CPU in all, on answers the target itself wrote to ShareGPT prompts: every usable first turn (several answers each), later turns with the conversation so far, long documents, and summaries, passage questions and translations made from ShareGPT's own text. EAGLE-1 (which EAGLE-2 also uses) trained for about 1.5 hours, Medusa for 45 minutes. The papers train on GPUs with tens of thousands of conversations (EAGLE-1: about 68,000 ShareGPT dialogues). Every run still improved the heads; the full record, with commands and numbers, is in assets/heads/…/TRAINING.md.\n"
        "- **Extra tokens are not free on this CPU.** In fp32 a 16-token pass costs several times a 1-token pass here (see the what-if), so the tuned trees are tiny and the speedup stays near 1, and at equal trees EAGLE-3 keeps only a little more per round than EAGLE-2 (2.61 against 2.50 tokens at 26 nodes on the 60 built-in prompts; in the shipped 12-prompt profiles, 0.00-0.14 ahead from 2 to 49 nodes and up to 0.04 behind from 50 to 64; the papers have EAGLE-3 well ahead), both more than EAGLE-1 and Medusa.",
        "- **目标模型只有 1.35 亿参数。** 论文中的目标模型有 70 亿到 700 亿参数。这里一步起草（一个解码器层加一个 4.9 万词的 LM 头）就占整个目标前向相当大的比例，因此起草相对昂贵；而且小模型的下一个 token 更难从其特征中猜出。\n"
        "- **草稿头在 CPU 上短时间训练。** EAGLE-3 共训练 13 次（第一次从零开始，之后都是微调），在 2 核 CPU 上总计约 15.5 小时，训练数据是目标模型自己对 ShareGPT 提示写出的回答：所有可用的首轮提问（每个有多条回答）、带有先前对话的后续轮次、长文档，以及用 ShareGPT 自身文本构造的摘要、段落问答和翻译任务。EAGLE-1（EAGLE-2 也用它）训练约 1.5 小时，Medusa 训练 45 分钟。论文在 GPU 上用数万条对话训练（EAGLE-1：约 68,000 条 ShareGPT 对话）。每次训练都仍让草稿头进步；完整记录（含命令与数字）见 assets/heads/…/TRAINING.md。\n"
        "- **在这台 CPU 上额外 token 并不免费。** 以 fp32 运行时，一次处理 16 个 token 的前向要花单个 token 的好几倍（见硬件假设推演），所以调优后的树非常小，加速比接近 1；在相同大小的树下，EAGLE-3 每轮保留的 token 只比 EAGLE-2 略多（在 60 个内置提示上、26 个节点时为 2.61 对 2.50；在随附的 12 个提示的接受率剖面中，2 到 49 个节点时领先 0.00-0.14，50 到 64 个节点时最多落后 0.04；论文中 EAGLE-3 明显领先），两者都多于 EAGLE-1 和 Medusa。",
    ),
    "cmpx.run_settings": ("Run settings, machine and date", "运行设置、机器与日期"),
    "cmpx.tree_desc": ("{n} nodes, depth {d} ({src})", "{n} 个节点，深度 {d}（{src}）"),
    "cmpx.tree_desc_floor": ("paths at least {p:.2f} likely, depth {d} ({src})", "概率不低于 {p:.2f} 的路径，深度 {d}（{src}）"),
    # ---- losslessness page
    "loss.title": ("Losslessness: same distribution, proven and measured", "无损性：分布相同，有证明也有测量"),
    "loss.intro": (
        "Speculative sampling must produce exactly the target's distribution. Two checks: the exact output distribution of one round, computed by enumerating every path of the acceptance walk, compared with the target's p; and an empirical test drawing many samples with vanilla and with speculative decoding.",
        "推测采样必须精确地产生目标模型的分布。两种检查：一是枚举接受过程的所有路径，精确计算一轮的输出分布并与目标 p 比较；二是分别用普通解码和推测解码大量采样进行经验检验。",
    ),
    "loss.prompt_hint": (
        "A prompt with many plausible answers (high entropy) shows differences best; at horizon 1 some drafters propose nothing to check.",
        "可能答案很多（高熵）的提示词最能显示差异；长度为 1 时部分草稿器没有可检查的草稿。",
    ),
    "loss.samples": ("Samples", "样本数"),
    "loss.horizon": ("Horizon (tokens)", "长度（token）"),
    "loss.variant": ("Acceptance rule", "接受规则"),
    "loss.correct": ("correct rule", "正确规则"),
    "loss.run": ("Run the check", "运行检查"),
    "loss.exact": ("Exact check", "精确检查"),
    "loss.empirical": ("Empirical check", "经验检查"),
    "loss.maxdiff": ("max |computed − target p|", "最大 |计算值 − 目标 p|"),
    "loss.chi2": ("chi-square p-value", "卡方检验 p 值"),
    "loss.tv": ("TV distance", "总变差距离"),
    "loss.tv_bound": ("TV bound (95%)", "总变差上界（95%）"),
    "loss.pass": ("PASS", "通过"),
    "loss.fail": ("FAIL", "未通过"),
    "loss.exact_p": ("exact target p", "精确目标 p"),
    "loss.vanilla": ("vanilla", "普通解码"),
    "loss.spec": ("speculative", "推测解码"),
    "loss.bug_zoo": ("Bug zoo: real mistakes, caught by the same test", "常见错误示例：真实出现过的错误，同一检验即可发现"),
    "loss.greedy_note": ("Temperature is 0 (greedy): the check is token-identity against vanilla.", "温度为 0（贪心）：检查与普通解码的 token 是否完全一致。"),
    "loss.greedy_identical": ("Greedy speculative output identical to vanilla: {same}", "贪心推测解码输出与普通解码一致：{same}"),
    "loss.outcome": ("outcome", "结果"),
    "loss.method": ("Drafter to check", "要检查的草稿器"),
    "loss.settings_same": ("Sampling settings: the sidebar's.", "采样设置：与侧边栏相同。"),
    "loss.settings_differ": (
        "This check samples at temperature {t:.2f}, top-k {k}, top-p {p:.2f}; the sidebar is set to temperature {st:.2f}, top-k {sk}, top-p {sp:.2f}. A losslessness check needs sampling (temperature > 0): at temperature 0 it reduces to comparing tokens with vanilla.",
        "本检查的采样设置为：温度 {t:.2f}，top-k {k}，top-p {p:.2f}；侧边栏的设置为：温度 {st:.2f}，top-k {sk}，top-p {sp:.2f}。无损性检查需要采样（温度 > 0）：温度为 0 时只需逐个 token 与普通解码比较。",
    ),
    "loss.greedy_toy": ("The toy drafters only make sense when sampling: raise the temperature, or pick PLD or EAGLE.", "玩具草稿器只在采样时有意义：请提高温度，或选择 PLD 或 EAGLE。"),
    "loss.greedy_count": ("({n} tokens, {method})", "（{n} 个 token，{method}）"),
    "loss.ran_with": ("Checked {method} at temperature {t:.2f}, top-k {k}, top-p {p:.2f}.", "已检查 {method}：温度 {t:.2f}，top-k {k}，top-p {p:.2f}。"),
    "loss.other": ("other ({n})", "其他（{n}）"),
    "loss.markers": (
        "Bars: how often each continuation came out of vanilla and of speculative sampling. Black diamonds: its exact probability under the target (the product of the target's p along it); both bars should sit on the diamond up to sampling noise.",
        "柱形：普通采样和推测采样各自产生每种续写的频率。黑色菱形：该续写在目标模型下的精确概率（沿途目标 p 的乘积）；两根柱子都应在抽样噪声范围内落在菱形上。",
    ),
    "loss.exact_verdict": (
        "{v}: max |P_spec − P_target| = {d:.1e} over the first {k} token(s) of the round at the prompt ({n} draft tokens in its tree); the threshold is {tol:.0e} (floating-point rounding). This is computed by enumerating every path of the acceptance walk, not by sampling, so it decides.",
        "{v}：在提示词处这一轮的前 {k} 个 token 上（其草稿树有 {n} 个草稿 token），最大 |P_推测 − P_目标| = {d:.1e}；阈值为 {tol:.0e}（浮点舍入误差）。它通过枚举接受过程的每一条路径精确计算，而不是抽样，因此起决定作用。",
    ),
    "loss.exact_trivial": (
        "The drafter proposed nothing at the prompt, so the exact check there is trivial (max difference {d:.1e}, threshold {tol:.0e}); the sampling test below still covers later positions.",
        "草稿器在提示词处没有提出草稿，因此那里的精确检查是平凡的（最大差值 {d:.1e}，阈值 {tol:.0e}）；下面的抽样检验仍覆盖之后的位置。",
    ),
    "loss.exact_none": ("The exact check is not computable for this drafter here; only the sampling test below applies.", "此处无法为该草稿器计算精确检查；只适用下面的抽样检验。"),
    "loss.chi2_verdict": (
        "{v}: chi-square p-value = {p:.3g} (fails at ≤ {a:g}); chi² = {chi2:.1f} on {dof} degrees of freedom.",
        "{v}：卡方检验 p 值 = {p:.3g}（≤ {a:g} 判为未通过）；chi² = {chi2:.1f}，自由度 {dof}。",
    ),
    "loss.chi2_note": (
        "With a correct rule the p-value is uniform between 0 and 1: values like 0.02 happen one run in fifty and are not a failure. A broken rule drives it towards 0 as samples grow; the threshold {a:g} keeps false alarms to one run in a thousand.",
        "规则正确时，p 值在 0 与 1 之间均匀分布：像 0.02 这样的值每五十次运行就会出现一次，并不表示失败。规则错误时，随着样本增多 p 值趋向 0；阈值 {a:g} 把误报控制在千分之一。",
    ),
    "loss.run_stats": ("Speculative run: {tau:.2f} tokens per round, acceptance {acc:.2f}; {n} × 2 samples in {s:.1f} s.", "推测采样：每轮 {tau:.2f} 个 token，接受率 {acc:.2f}；{n} × 2 个样本，用时 {s:.1f} 秒。"),
    "loss.tv_title": ("Total-variation distance: what it can and cannot say", "总变差距离：它能说明什么，不能说明什么"),
    "loss.tv_explain": (
        "The plug-in distance between the two histograms is TV = {tv:.4f} over {bins} bins, and with 95% confidence the true distance is at most {bound:.4f}. The bound holds for any distributions, so it is loose: with {n} samples per side it stays well above the gaps a broken rule typically makes, and it cannot tell a correct rule from a slightly wrong one. Read it as a size of the difference, not as the verdict; the exact check and the chi-square test decide.",
        "两个直方图之间的插值距离为 TV = {tv:.4f}（共 {bins} 个区间），在 95% 置信度下真实距离不超过 {bound:.4f}。这个上界对任何分布都成立，因此很宽松：每边 {n} 个样本时，它仍远大于错误规则通常造成的差异，无法区分正确规则与略有错误的规则。请把它当作差异大小的度量，而不是结论；起决定作用的是精确检查和卡方检验。",
    ),
    "loss.overall": ("Verdict (exact check and sampling test)", "结论（精确检查与抽样检验）"),
    "loss.side_by_side": ("Correct rule vs this bug", "正确规则与该错误对比"),
    # ---- why it is free
    "free.title": ("When checking many tokens costs about as much as one, and when it does not", "检查多个 token 何时与检查一个代价相当，何时不是"),
    "free.intro": (
        "Decoding one token at a time is usually limited by reading the weights from memory, not by arithmetic: a pass over N tokens reads the same weights as a pass over one, so on a GPU the extra tokens ride along almost for free. On a small CPU they do not: the arithmetic of every extra token shows. How free they are depends on the hardware: measure it here, live, on this machine.",
        "逐个 token 解码通常受限于从内存读取权重，而不是计算：处理 N 个 token 的一次前向与处理一个 token 读取的是同样的权重，因此在 GPU 上多出的 token 几乎是顺带完成的。在小型 CPU 上则不然：每个额外 token 的计算开销都会显现。到底有多“免费”取决于硬件：在这里于本机实时测量。",
    ),
    "free.weights": ("Weights read by each pass", "每次前向读取的权重"),
    "free.weights.blocks": ("GGUF 4-bit blocks (runtime default)", "GGUF 4 位块（运行时默认）"),
    "free.weights.dense": ("dense fp32 (6x more bytes)", "稠密 fp32（字节数多 6 倍）"),
    "free.weights_note": (
        "Both compute the same fp32 model. With dense fp32 weights a pass is bound by memory and the curve stays flat for small N; with the GGUF's 4-bit blocks there are 6x fewer bytes to read, the first token gets much cheaper, and the multiply-adds of every extra token start to show on a CPU (on a GPU they stay hidden).",
        "两者计算的是同一个 fp32 模型。使用稠密 fp32 权重时，前向受内存带宽限制，N 较小时曲线几乎平坦；使用 GGUF 的 4 位块时，需要读取的字节少 6 倍，第一个 token 便宜得多，而在 CPU 上每个额外 token 的乘加开销开始显现（在 GPU 上仍被掩盖）。",
    ),
    "free.measure": ("Measure forward latency", "测量前向延迟"),
    "free.grid": ("Measure batch × tokens grid", "测量 批大小 × token 数 网格"),
    "free.repeats": ("Repeats per point (median reported)", "每点重复次数（取中位数）"),
    "free.context": ("Context length", "上下文长度"),
    "free.one_pass": ("one pass of N tokens", "一次前向处理 N 个 token"),
    "free.n_passes": ("N separate passes (N × one token)", "N 次单独前向（N × 单 token）"),
    "free.tokens_axis": ("tokens in one pass (N)", "一次前向的 token 数（N）"),
    "free.ms_axis": ("latency (ms, median)", "延迟（毫秒，中位数）"),
    "free.rel_axis": ("latency relative to N = 1", "相对 N = 1 的延迟"),
    "free.batch_axis": ("batch size", "批大小"),
    "free.speedup_axis": ("predicted speedup", "预测加速比"),
    "free.draft_cost": ("Draft cost", "起草成本"),
    "free.tau_input": ("tau (tokens per round) for the prediction", "用于预测的 tau（每轮 token 数）"),
    "free.tree_n": ("Tree size verified per round (N)", "每轮验证的树大小（N）"),
    "free.predicted": (
        "Predicted speedup = tau × t(B, 1) / (t(B, N) + draft time), from the latencies measured above; the EAGLE-3 paper reports 1.81x at batch 2 and 1.38x at batch 64 on GPUs.",
        "预测加速比 = tau × t(B, 1) / (t(B, N) + 起草时间)，使用上面测得的延迟；EAGLE-3 论文在 GPU 上报告批大小 2 时为 1.81 倍，64 时为 1.38 倍。",
    ),
    "free.tau_from": ("tau measured from the last Home/Compare run: {tau:.2f} ({method})", "来自最近一次首页/比较运行的 tau：{tau:.2f}（{method}）"),
    "free.noisy": (
        "These timings swing widely between repeats (whiskers: min to max): something else is using the CPU. The curve's shape is only trustworthy on an otherwise idle machine; measure again when it is.",
        "各次重复之间的计时波动很大（误差线：最小值到最大值）：有其他程序正在占用 CPU。只有在机器空闲时，曲线的形状才可信；请在空闲时重新测量。",
    ),
    "free.ratio": ("A pass of {n} tokens costs {r:.2f}x one token.", "一次处理 {n} 个 token 的代价是单个 token 的 {r:.2f} 倍。"),
    "free.draft_measured": ("Draft time per round measured in the last run: {ms:.1f} ms ({method}).", "最近一次运行测得的每轮起草时间：{ms:.1f} 毫秒（{method}）。"),
    "free.no_run": ("Run a generation on Home first to measure tau and the draft cost for your method.", "请先在首页运行一次生成，以测量所选方法的 tau 和起草成本。"),
    "freex.this_cached": ("this machine (measured by the tree tuner)", "本机（由草稿树调优测得）"),
    "freex.this_live": ("this machine (measured just now)", "本机（刚刚测得）"),
    "freex.not_free_here": (
        "**Not free here.** On this CPU in fp32 one target pass over 16 tokens costs {r:.1f}x a pass over one ({t16:.1f} ms vs {t1:.1f} ms, measured): every extra tree token costs real time, so only small trees pay. The idea holds where a pass is bound by reading the weights (GPUs, large models); measure below to see this machine's curve.",
        "**在这里并不免费。** 在这台 CPU 上以 fp32 运行时，目标模型一次处理 16 个 token 的前向耗时是处理一个 token 的 {r:.1f} 倍（实测 {t16:.1f} 毫秒对 {t1:.1f} 毫秒）：每个额外的树 token 都要花真实的时间，所以只有小树才划算。这一思路成立的前提是前向受限于读取权重（GPU、大模型）；在下面测量可以看到本机的曲线。",
    ),
    "freex.not_free_general": (
        "**Not free everywhere.** Extra tokens ride along for free only while a pass is bound by reading the weights. On a small CPU in fp32 the arithmetic of each extra token shows: measure below to see how much it costs on this machine.",
        "**并非处处免费。** 只有当前向受限于读取权重时，额外的 token 才能免费搭车。在小型 CPU 上以 fp32 运行时，每个额外 token 的计算开销会显现出来：在下面测量可以看到它在本机的代价。",
    ),
    "freex.no_gpu": (
        "No latency curve measured on a GPU ships with this version yet, so only this machine's is drawn; none is made up. Once measured (`python -m specviz.tuning show` on a GPU, its cost file copied into assets/curves/), it is drawn beside this machine's.",
        "此版本尚未附带在 GPU 上测得的延迟曲线，因此这里只画本机的曲线，不会编造任何数字。一旦测得（在 GPU 上运行 `python -m specviz.tuning show`，并把它写出的成本文件复制到 assets/curves/），它就会画在本机曲线旁边。",
    ),
    "freex.settings": ("{dtype} · context {ctx} · {weights}", "{dtype} · 上下文 {ctx} · {weights}"),
    "freex.rel_title": ("Cost of N tokens relative to one, per machine", "各机器上 N 个 token 相对单个 token 的代价"),
    "freex.rel_note": (
        "Green dashed line: free (N tokens cost as much as one). Dotted diagonal: no gain at all (as expensive as N separate passes). A speculative tree of N tokens pays only when tau exceeds this ratio plus the drafting cost.",
        "绿色虚线：免费（N 个 token 与一个 token 代价相同）。点状对角线：毫无收益（与 N 次单独前向一样贵）。只有当 tau 超过这个比值加上起草成本时，N 个 token 的推测树才划算。",
    ),
    "freex.free_line": ("free", "免费"),
    "freex.draft_none": (
        "No generation has run in this session, so no drafting time is measured yet; the batch prediction below then uses the shipped EAGLE-3 acceptance profile and this machine's cached drafting cost (if the tree tuner measured it).",
        "本次会话尚未运行生成，因此还没有测得起草时间；下面的批处理预测会使用附带的 EAGLE-3 接受率档案，以及本机缓存的起草成本（如果草稿树调优已经测过）。",
    ),
    "freex.grid_intro": (
        "Serving many users at once fills each pass with a batch of sequences, and then the spare capacity that made tree tokens cheap is used up: the same tree pays less at larger batch sizes.",
        "同时服务许多用户时，每次前向都装满了一批序列，原本让树 token 变便宜的空闲算力就被用掉了：同一棵树在更大的批大小下收益更小。",
    ),
    "freex.tau_profile": ("tau {tau:.2f}: {method} at a tree of {n} nodes, from its shipped acceptance profile (greedy, measured).", "tau {tau:.2f}：{method} 在 {n} 个节点的树上，取自其附带的接受率档案（贪心，实测）。"),
    "freex.draft_cached": ("Drafting cost {ms:.1f} ms per round, measured on this machine by the tree tuner.", "起草成本每轮 {ms:.1f} 毫秒，由草稿树调优在本机测得。"),
    "freex.draft_zero": ("Drafting cost not measured yet and counted as 0: the prediction is an upper bound.", "起草成本尚未测量，按 0 计算：预测值是一个上限。"),
    "freex.ctx64": ("context 64", "上下文 64"),
}
