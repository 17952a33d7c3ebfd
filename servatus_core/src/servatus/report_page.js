(function(){
const P=JSON.parse(document.getElementById('servatus-data').textContent);
const H=16,LH=22,LABEL=170,NS='http://www.w3.org/2000/svg';
const seg=P.segments,n=P.keys.length;
const byLane=new Array(n);
for(let i=0;i<seg.L.length;i++){const l=seg.L[i];(byLane[l]||(byLane[l]=[])).push(i);}
const pts=new Array(n);
for(const p of P.points){(pts[p[0]]||(pts[p[0]]=[])).push(p);}
let end=P.made;
for(let i=0;i<seg.E.length;i++)if(seg.E[i]>end)end=seg.E[i];
for(const l of P.leases)for(const s of l.segments)if(s[2]>end)end=s[2];
const span=Math.max(end,1);
const tl=document.getElementById('timeline'),axis=document.getElementById('axis');
const svg=document.getElementById('lanes'),filter=document.getElementById('filter');
const leaseRows=P.leases.map(l=>Math.max(LH,Math.min(l.slots,8)*6+10));
const leaseHeight=leaseRows.reduce((a,b)=>a+b,0);
let shown=[...Array(n).keys()];
function colour(w){return P.colours[P.words[w].split(' ')[0]]||'#999';}
function when(t){return new Date((P.t0+t/10)*1000).toISOString().replace('T',' ').slice(0,19)+'Z';}
function dur(t){t=Math.round(t/10);const d=Math.floor(t/86400),h=Math.floor(t%86400/3600),
  m=Math.floor(t%3600/60),s=t%60,p=x=>String(x).padStart(2,'0');
  return (d?d+'-':'')+p(h)+':'+p(m)+':'+p(s);}
function width(){return Math.max(300,tl.clientWidth-LABEL-20);}
function x(t){return LABEL+t/span*width();}
function el(name,attrs,parent){const e=document.createElementNS(NS,name);
  for(const k in attrs)e.setAttribute(k,attrs[k]);if(parent)parent.appendChild(e);return e;}
function title(e,text){el('title',{},e).textContent=text;}
function drawAxis(){axis.replaceChildren();const w=width();axis.setAttribute('width',LABEL+w+10);
  axis.setAttribute('height',20);const ticks=6;
  for(let i=0;i<=ticks;i++){const t=span*i/ticks,px=x(t);
    el('line',{x1:px,x2:px,y1:14,y2:20,stroke:'#555'},axis);
    const label=el('text',{x:px,y:11,'font-size':10,'text-anchor':i==0?'start':i==ticks?'end':'middle'},axis);
    label.textContent=when(t).slice(5,16);}}
const stepSegments=new Map();
for(let j=0;j<seg.W.length;j++){const w=seg.W[j];
  if(w>=0&&P.spans[seg.S[j]]!='queued'){(stepSegments.get(w)||stepSegments.set(w,[]).get(w)).push(j);}}
for(const v of stepSegments.values())v.sort((a,b)=>seg.B[a]-seg.B[b]);
function stepsOf(l){return stepSegments.get(P.allocations.indexOf(l.id))||[];}
function drawLease(l,y,h,g){
  const lane=el('g',{class:'lease','data-allocation':l.id,transform:'translate(0,'+y+')'},g);
  const label=el('text',{x:4,y:13},lane);label.textContent='lease '+l.id.slice(0,8)+(l.link?' link '+l.link:'');
  title(label,'lease '+l.id+' job '+l.job+', '+l.slots+' slots of '+l.profile+'; idle '+l.idle.toFixed(2)+' of '+l.held.toFixed(2)+' slot-hours');
  for(const s of l.segments){const r=el('rect',{class:'seg '+P.spans[s[0]],'data-span':P.spans[s[0]],
      x:x(s[1]),y:2,width:Math.max(1,x(s[2])-x(s[1])),height:h-4,fill:colour(s[3])},lane);
    if(P.spans[s[0]]=='running'||P.spans[s[0]]=='lost'){r.setAttribute('class','held seg '+P.spans[s[0]]);}
    title(r,'lease '+l.id+'\njob '+l.job+'\n'+P.spans[s[0]]+' '+P.words[s[3]]+'\n'+when(s[1])+' to '+when(s[2])+' ('+dur(s[2]-s[1])+')');}
  const rows=Math.min(l.slots,8),rh=(h-4)/rows,free=new Array(rows).fill(-1);
  for(const j of stepsOf(l)){let r=free.findIndex(e=>e<=seg.B[j]);
    if(r<0)r=free.indexOf(Math.min(...free));free[r]=seg.E[j];
    const k=seg.L[j],box=el('rect',{class:'step','data-key':P.keys[k],x:x(seg.B[j]),y:2+r*rh+0.5,
      width:Math.max(1,x(seg.E[j])-x(seg.B[j])),height:Math.max(1,rh-1),fill:colour(seg.X[j])},lane);
    title(box,'step '+P.keys[k]+' in lease '+l.id+'\nallocation '+P.allocations[seg.A[j]]+'\n'+P.words[seg.X[j]]+
      (seg.C[j]>=0?'\nexit code '+seg.C[j]:'')+'\n'+when(seg.B[j])+' to '+when(seg.E[j])+' ('+dur(seg.E[j]-seg.B[j])+')');}
  for(const t of l.points)el('path',{class:'limit',d:'M'+x(t)+' 0 L'+x(t)+' '+h},lane);}
function drawLane(i,y,g){
  const lane=el('g',{class:'lane','data-key':P.keys[i],transform:'translate(0,'+y+')'},g);
  const label=el('text',{x:4,y:13},lane);const key=P.keys[i];
  label.textContent=key.length>24?key.slice(0,23)+'\u2026':key;title(label,key+': '+P.words[P.now[i]]);
  for(const j of byLane[i]||[]){const s=P.spans[seg.S[j]],x0=x(seg.B[j]),x1=x(seg.E[j]);
    const tall=s=='queued'?H/2:H;
    const r=el('rect',{class:'seg '+s,'data-span':s,x:x0,y:(LH-tall)/2,width:Math.max(1,x1-x0),height:tall,fill:colour(seg.X[j])},lane);
    const a=seg.A[j],w=seg.W[j];
    title(r,key+'\nallocation '+P.allocations[a]+(w>=0?' (lease '+P.allocations[w]+')':'')+
      (seg.K[j]?'\nlink '+seg.K[j]:'')+'\njob '+(P.jobs[a]==null?'-':P.jobs[a])+'\n'+s+': '+P.words[seg.X[j]]+
      (seg.C[j]>=0?'\nexit code '+seg.C[j]:'')+'\n'+when(seg.B[j])+' to '+when(seg.E[j])+' ('+dur(seg.E[j]-seg.B[j])+(seg.O[j]?', still growing':'')+')');
    if(seg.K[j]&&s=='running'&&x1-x0>14){const t=el('text',{x:x0+2,y:15,fill:'#fff','font-size':10},lane);t.textContent=seg.K[j];}}
  for(const p of pts[i]||[]){const px=x(p[1]);const m=el('path',{class:'limit',d:'M'+px+' 1 L'+px+' '+(LH-1)},lane);
    title(m,'pre-limit signal '+when(p[1])+' ('+P.allocations[p[2]]+')');}}
function draw(){
  const w=width(),top=tl.scrollTop,view=tl.clientHeight;
  const total=leaseHeight+shown.length*LH;
  svg.setAttribute('width',LABEL+w+10);svg.setAttribute('height',total);
  svg.replaceChildren();
  const defs=el('defs',{},svg);const pat=el('pattern',{id:'unobserved',width:6,height:6,patternUnits:'userSpaceOnUse',patternTransform:'rotate(45)'},defs);
  el('rect',{width:6,height:6,fill:'#cfd8dc'},pat);el('line',{x1:0,y1:0,x2:0,y2:6,stroke:'#90a4ae','stroke-width':3},pat);
  const g=el('g',{},svg);let y=0;
  P.leases.forEach((l,k)=>{if(y+leaseRows[k]>=top-200&&y<=top+view+200)drawLease(l,y,leaseRows[k],g);y+=leaseRows[k];});
  const first=Math.max(0,Math.floor((top-leaseHeight)/LH)-20),last=Math.min(shown.length,Math.ceil((top+view-leaseHeight)/LH)+20);
  for(let k=first;k<last;k++)drawLane(shown[k],leaseHeight+k*LH,g);
  drawAxis();}
function apply(){const q=filter.value.trim().toLowerCase();
  shown=[];for(let i=0;i<n;i++){if(!q||P.keys[i].toLowerCase().includes(q)||P.words[P.now[i]].toLowerCase().includes(q))shown.push(i);}
  document.getElementById('shown').textContent=shown.length+' of '+n+' Tasks';draw();}
let pending=false;
tl.addEventListener('scroll',()=>{if(!pending){pending=true;requestAnimationFrame(()=>{pending=false;draw();});}});
window.addEventListener('resize',draw);filter.addEventListener('input',apply);
tl.setAttribute('data-lanes',n);apply();
document.body.setAttribute('data-render-ms',performance.now().toFixed(0));
})();
